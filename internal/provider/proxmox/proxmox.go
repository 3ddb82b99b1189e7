package proxmox

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/inflight"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/keyedlock"
)

// Provider is the proxmox provider.
type Provider struct {
	name string
	opts provider.Options
	cfg  Config
	// dest is what the instances' generated Squid config lets clients
	// reach, built once from the entry's egress settings.
	dest  *egress.Policy
	api   *client
	names keyedlock.Locks
	steps *inflight.Table
	dels  *inflight.Table
	// taskPoll is the interval between task status reads.
	taskPoll time.Duration
	// execPoll is the interval between agent/exec-status reads.
	execPoll time.Duration

	// shared /cluster/resources read: concurrent Gets within window share one.
	resMu   sync.Mutex
	resAt   time.Time
	resList []resource
	resWait chan struct{}
	window  time.Duration

	// onStepStarted, when set (tests), is told of every create step
	// started, with the channel closed when it has ended.
	onStepStarted func(name string, done <-chan struct{})

	// creating holds the creates started here, for ListByTag while the
	// clone runs (the VM carries no tag until its first config).
	creatingMu sync.Mutex
	creating   map[string]provider.Instance
	cloned     map[string]bool
}

func (p *Provider) setCloned(name string) {
	p.creatingMu.Lock()
	p.cloned[name] = true
	p.creatingMu.Unlock()
}

func (p *Provider) isCloned(name string) bool {
	p.creatingMu.Lock()
	defer p.creatingMu.Unlock()
	return p.cloned[name]
}

var _ provider.Provider = (*Provider)(nil)

var _ provider.Checker = (*Provider)(nil)

// New builds the provider; it makes no request.
func New(name string, cfg Config, opts provider.Options) (*Provider, error) {
	cfg.Default()
	if errs := cfg.Validate(nil); len(errs) > 0 {
		return nil, provider.Wrap(name, "new", provider.ErrPermanent, errs.ToAggregate())
	}
	return &Provider{
		name: name, opts: opts, cfg: cfg, dest: cfg.Settings.Policy(),
		api: &client{base: strings.TrimRight(cfg.URL, "/"), tokenFile: cfg.TokenFile, caFile: cfg.CAFile,
			insecure: cfg.InsecureSkipTLSVerify, timeout: time.Duration(cfg.RequestTimeoutSeconds) * time.Second},
		steps: inflight.New(provider.OpCreate), dels: inflight.New(provider.OpDelete),
		taskPoll: time.Second, execPoll: defaultExecPoll, window: time.Second, creating: map[string]provider.Instance{}, cloned: map[string]bool{},
	}, nil
}

// Close stops the steps in flight.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), inflight.StopBound)
	defer cancel()
	err1 := p.steps.Close(ctx)
	err2 := p.dels.Close(ctx)
	if err1 != nil {
		return err1
	}
	return err2
}
