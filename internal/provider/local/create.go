package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// maxInUse caps the addresses Create tries when another process holds the
// port on them: a wildcard listener on the port holds it on every address,
// and a /8 would otherwise mean millions of binds.
const maxInUse = 1024

// Create starts an instance on the lowest free address of the range and
// returns it Running, or adopts the instance already recorded under
// req.Name.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	inst, how, err := p.create(ctx, p.logger(ctx), req)
	if err == nil {
		provider.Note(ctx, "outcome", how)
	}
	return inst, err
}

func (p *Provider) create(ctx context.Context, log logr.Logger, req provider.CreateRequest) (provider.Instance, string, error) {
	if err := p.begin(ctx, provider.OpCreate); err != nil {
		return provider.Instance{}, "", err
	}
	a, err := validateRequest(req, p.policy)
	if err != nil {
		return provider.Instance{}, "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return provider.Instance{}, "", provider.Errorf(provider.ErrTransient, "%w", errClosed)
	}
	if in, ok := p.instances[req.Name]; ok {
		verdict := provider.CheckAdoption(in.marks, p.opts.InstallationID, req.UID)
		if err := provider.AdoptionError(verdict, req.Name); err != nil {
			return provider.Instance{}, "", err
		}
		if in.marks.UID == "" {
			in.marks.UID = req.UID // complete the mark a crash may have left out
		}
		if in.srv != nil && in.srv.alive() {
			// The request is the source of truth for who may connect.
			in.srv.setACL(a)
			log.V(2).Info("adopted running instance", "ip", in.ip.String(), "allowedSourceRanges", a.String())
			return p.view(in), "adopted", nil
		}
		// Recorded but not serving: like a stopped VM, adopting starts it.
		if err := p.start(ctx, log, in, req.Port, a); err != nil {
			return provider.Instance{}, "", err
		}
		return p.view(in), "adopted and started", nil
	}
	in := &instance{
		name:      req.Name,
		marks:     provider.Marks{Managed: true, UID: req.UID, Installation: p.opts.InstallationID},
		createdAt: time.Now().UTC(),
	}
	if err := p.start(ctx, log, in, req.Port, a); err != nil {
		return provider.Instance{}, "", err
	}
	p.instances[req.Name] = in
	return p.view(in), "created", nil
}

// validateRequest checks what no retry can fix, naming every bad entry.
func validateRequest(req provider.CreateRequest, entry *egress.Policy) (*acl, error) {
	var problems []string
	if req.Name == "" {
		problems = append(problems, "name is empty")
	} else if msgs := validation.IsDNS1123Label(req.Name); len(msgs) > 0 {
		// The name is the key of the ID, which must round-trip.
		problems = append(problems, fmt.Sprintf("name %q: %s", req.Name, strings.Join(msgs, "; ")))
	}
	if req.Port < 1 || req.Port > 65535 {
		problems = append(problems, fmt.Sprintf("port %d is outside 1-65535", req.Port))
	}
	a, bad := parseACL(entry, req)
	problems = append(problems, bad...)
	if len(problems) > 0 {
		return nil, invalidRequest("invalid request: %s", strings.Join(problems, "; "))
	}
	return a, nil
}

// start binds an address for in and serves it; the caller holds p.mu.
func (p *Provider) start(ctx context.Context, log logr.Logger, in *instance, port int32, a *acl) error {
	if in.srv != nil {
		in.srv.close() // a listener that died on its own: let it drain
		p.release(in)
		in.srv = nil
	}
	ln, ip, err := p.bind(ctx, port)
	if err != nil {
		return err
	}
	p.servers.Add(1)
	in.ip = ip
	p.bound[ip] = in
	id := instanceID(in.name)
	in.srv = newServer(ln, a, p.upstream, serverLogger(log, ip, port), p.servers.Done, func() { p.changed(id) })
	log.V(2).Info("listening", "address", ln.Addr().String(), "range", p.cidr.String(),
		"allowedSourceRanges", a.String())
	return nil
}

// bind listens on the lowest free address of the range that no instance
// holds, skipping addresses something else already listens on. The scan
// starts at p.low, below which every address is reserved or held by an
// instance, and looks holders up in p.bound: a fleet's creates cost no
// walk over every instance (at 10,000 instances, building that set for
// each create was most of the provider's time). The caller holds p.mu, so
// two Creates never pick the same address.
func (p *Provider) bind(ctx context.Context, port int32) (net.Listener, netip.Addr, error) {
	var lc net.ListenConfig
	inUse := 0
	var gap netip.Addr // the first address skipped for being in use elsewhere
	start := p.low
	if !start.IsValid() || !p.cidr.Contains(start) {
		start = p.cidr.Addr().Next()
	}
	for addr := start; addr.IsValid() && p.cidr.Contains(addr); addr = addr.Next() {
		if reserved(p.cidr, addr) || p.holds(addr) {
			continue
		}
		if err := provider.CtxErr(ctx, p.name, provider.OpCreate); err != nil {
			return nil, netip.Addr{}, err
		}
		ap := netip.AddrPortFrom(addr, uint16(port))
		ln, err := lc.Listen(ctx, "tcp4", ap.String())
		if err == nil {
			p.low = addr.Next()
			if gap.IsValid() {
				p.low = gap
			}
			return ln, addr, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, netip.Addr{}, classifyListen(ap, err)
		}
		if !gap.IsValid() {
			gap = addr
		}
		inUse++
		if inUse >= maxInUse {
			break
		}
	}
	if gap.IsValid() {
		p.low = gap
	}
	return nil, netip.Addr{}, exhausted(p.cidr, p.usable, p.held(), inUse, port)
}

// holds says whether an instance listens on addr.
func (p *Provider) holds(addr netip.Addr) bool {
	in := p.bound[addr]
	return in != nil && in.srv != nil && in.ip == addr && p.instances[in.name] == in
}

// held counts the addresses instances listen on.
func (p *Provider) held() int {
	n := 0
	for addr := range p.bound {
		if p.holds(addr) {
			n++
		}
	}
	return n
}

// release frees the address in listened on, for the next bind.
func (p *Provider) release(in *instance) {
	if in.srv == nil || !in.ip.IsValid() {
		return
	}
	if p.bound[in.ip] == in {
		delete(p.bound, in.ip)
	}
	if !p.low.IsValid() || in.ip.Less(p.low) {
		p.low = in.ip
	}
}

// serverLogger is the logger an instance keeps for its life: the Create's
// with the address, or none when the Create's logger drops V(1), since
// every line a server writes is V(1) or V(2). A kept logger pins the
// Create's (a zap clone with its encoded fields, about 1.5 KiB): 15 MiB
// of a 10,000-instance fleet's heap at the default verbosity, for lines
// that are never written.
func serverLogger(log logr.Logger, ip netip.Addr, port int32) logr.Logger {
	if !log.V(1).Enabled() {
		return logr.Discard()
	}
	// One key for the instance: an access line has its own port.
	return log.WithValues("instance", netip.AddrPortFrom(ip, uint16(port)).String())
}
