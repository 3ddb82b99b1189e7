package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/inflight"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/keyedlock"
)

// The type names this package is registered under (its Descriptor):
// both read the same Config with Parse and are
// built by New, so they behave, and mark their instances, alike.
const (
	TypeKVM  = "kvm"
	TypeKVM2 = "kvm2"
)

// TypeNames are both type names.
var TypeNames = []string{TypeKVM, TypeKVM2}

// PollInterval is the pace at which the reconciler polls Get while an
// instance provisions: a VM boots in tens of seconds (the real Debian guest
// reports its address about 40 s after start under emulation).
const PollInterval = 10 * time.Second

// Provider runs instances as libvirt domains on the configured hosts. It
// implements provider.Provider, provider.Checker and io.Closer.
type Provider struct {
	name  string
	opts  provider.Options
	cfg   Config
	hosts []Host
	// dest is what the instances' Squid lets clients reach.
	dest *egress.Policy

	auth    sshAuth
	ssh     *sshDialer
	budgets budgets
	// table holds the pooled connection of each host.
	table *hostTable

	// names serialises Create and Delete of one instance name; images
	// serialises the download of one image to one host ("<host>/<sha256>").
	names  keyedlock.Locks
	images keyedlock.Locks
	// steps runs the slow part of each Create (image, volumes, define,
	// start) in the background, keyed by instance name; creating says
	// which host and Proxy each running step is for, so that ListByTag
	// lists an instance from its first moment, before the host shows it.
	steps    *inflight.Table
	creating inflight.Set[creatingInstance]
	// http downloads images; a test seam.
	http *http.Client
	// now stamps createdAt; a test seam.
	now func() time.Time

	// tracerProvider is a test seam for the child spans; nil means the
	// global provider, which telemetry.Setup installs.
	tracerProvider trace.TracerProvider
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Checker  = (*Provider)(nil)
	_ io.Closer         = (*Provider)(nil)
)

// New builds a provider named name (the configured name, used in every
// error and log line) from a parsed config. It does no I/O: no host is
// dialled and no credential is read until a call needs one, so a host or a
// Secret that is missing at start does not stop the operator; the health
// loop reports it.
func New(name string, cfg Config, opts provider.Options) (*Provider, error) {
	cfg.Default()
	if errs := cfg.Validate(nil); len(errs) > 0 {
		return nil, provider.Wrap(name, "new", provider.ErrPermanent, errs.ToAggregate())
	}
	auth := sshAuth{keyFile: cfg.SSHKeyFile, knownHostsFile: cfg.KnownHostsFile, insecure: cfg.InsecureIgnoreHostKey}
	p := &Provider{
		name:    name,
		opts:    opts,
		cfg:     cfg,
		hosts:   append([]Host(nil), cfg.Hosts...),
		dest:    cfg.destinations(),
		auth:    auth,
		ssh:     newSSHDialer(auth),
		budgets: defaultBudgets,
		steps:   inflight.New(provider.OpCreate),
		http:    newImageClient(),
		now:     time.Now,
	}
	p.table = newHostTable(p.connect)
	return p, nil
}

// Close closes the pooled connections. The registry calls it when the
// entry is removed or rebuilt and at shutdown; later calls fail Transient.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), inflight.StopBound)
	defer cancel()
	err := p.steps.Close(ctx)
	return errors.Join(err, p.table.Close())
}

// host finds a configured host by name.
func (p *Provider) host(name string) (Host, bool) {
	for _, h := range p.hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// connect is the production connector: SSH to the host's libvirt socket,
// then libvirt's connect, within the dial budget, observed (a
// libvirt.dial span, a log line) and with every RPC of the result observed.
func (p *Provider) connect(ctx context.Context, h Host) (backend, error) {
	ctx, cancel := context.WithTimeout(ctx, p.budgets.dial)
	defer cancel()
	ctx, end := p.startDial(ctx, h)
	sock, err := p.ssh.dial(ctx, h)
	if err != nil {
		end(err)
		return nil, err
	}
	hostport, _ := sshAddress(h.Address) // Validate proved it
	b, err := connectLibvirt(ctx, h.Name, hostport, sock, p.budgets)
	if err != nil {
		end(err)
		return nil, err
	}
	end(nil)
	return p.observe(h.Name, b), nil
}

func (p *Provider) String() string { return fmt.Sprintf("libvirt provider %q", p.name) }
