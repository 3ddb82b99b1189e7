package local

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// checkDialTimeout bounds each listener's dial, so one wedged listener
// cannot use up the whole check's budget.
const checkDialTimeout = 2 * time.Second

// Check reports whether the range can be bound and every instance's listener
// accepts connections. Reasons: Healthy, Degraded (some listeners do not
// accept), Unreachable (the range cannot be bound, or the provider is
// closed), Timeout (ctx ended), APIError (an injected fault).
func (p *Provider) Check(ctx context.Context) provider.CheckResult {
	return p.check(ctx)
}

// listenerTarget is one instance as Check sees it.
type listenerTarget struct {
	name    string
	addr    string // empty: no listener
	serving bool
	srv     *server // the listener the snapshot saw, nil for none
}

func (p *Provider) check(ctx context.Context) provider.CheckResult {
	res := provider.CheckResult{
		Target:  "listeners",
		Address: p.cidr.String(),
		Details: map[string]string{"bindCIDR": p.cidr.String()},
	}
	if err := p.begin(ctx, provider.OpCheck); err != nil {
		res.Reason, res.Message = failReason(ctx), err.Error()
		return res
	}

	p.mu.Lock()
	closed := p.closed
	targets := make([]listenerTarget, 0, len(p.instances))
	taken := 0
	for _, in := range p.instances {
		t := listenerTarget{name: in.name}
		if in.srv != nil {
			taken++
			t.addr, t.serving, t.srv = in.srv.ln.Addr().String(), in.srv.alive(), in.srv
		}
		targets = append(targets, t)
	}
	p.mu.Unlock()
	sort.Slice(targets, func(i, j int) bool { return targets[i].name < targets[j].name })
	res.Details["instances"] = strconv.Itoa(len(targets))
	res.Details["freeAddresses"] = strconv.Itoa(max(0, p.usable-taken))

	if closed {
		res.Reason, res.Message = provider.ReasonUnreachable, errClosed.Error()
		return res
	}
	if err := p.probe(ctx); err != nil {
		res.Reason = provider.ReasonUnreachable
		if ctx.Err() != nil {
			res.Reason = provider.ReasonTimeout
		}
		res.Message = err.Error()
		return res
	}
	var dead []string
	checked := len(targets)
	for i, t := range targets {
		if p.beforeCheckDial != nil {
			p.beforeCheckDial(t.name)
		}
		if why := dialListener(ctx, t); why != "" {
			if ctx.Err() != nil {
				res.Reason = provider.ReasonTimeout
				res.Message = fmt.Sprintf("checked %d of %d listeners before the deadline: %v", i, len(targets), ctx.Err())
				return res
			}
			if p.changedSince(t) {
				// Deleted or restarted since the snapshot (the dials take
				// seconds at thousands of instances): its closed listener
				// says nothing about the listeners that serve.
				checked--
				continue
			}
			dead = append(dead, fmt.Sprintf("%s (%s)", t.name, why))
		}
	}
	if len(dead) > 0 {
		res.Reason = provider.ReasonDegraded
		res.Message = fmt.Sprintf("%d of %d listeners do not accept connections: %s",
			len(dead), checked, strings.Join(dead, ", "))
		return res
	}
	res.Healthy, res.Reason = true, provider.ReasonHealthy
	res.Message = fmt.Sprintf("range %s binds; all %d listeners accept connections", p.cidr, checked)
	return res
}

// changedSince says whether t's instance is no longer recorded with the
// listener the snapshot saw.
func (p *Provider) changedSince(t listenerTarget) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	in, ok := p.instances[t.name]
	return !ok || in.srv != t.srv
}

// probe proves the range can be bound at all (it is routed to the loopback
// interface), which matters most when no instance exists yet. An ephemeral
// port never collides with an instance's port.
func (p *Provider) probe(ctx context.Context) error {
	addr := p.cidr.Addr().Next()
	for reserved(p.cidr, addr) {
		addr = addr.Next()
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp4", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return fmt.Errorf("cannot listen in %s: %w", p.cidr, err)
	}
	return ln.Close()
}

// dialListener says why t does not accept connections, or "" when it does.
func dialListener(ctx context.Context, t listenerTarget) string {
	switch {
	case t.addr == "":
		return "stopped"
	case !t.serving:
		return "listener stopped"
	}
	d := net.Dialer{Timeout: checkDialTimeout}
	conn, err := d.DialContext(ctx, "tcp4", t.addr)
	if err != nil {
		return err.Error()
	}
	_ = conn.Close()
	return ""
}

// failReason is the reason for a check that could not start.
func failReason(ctx context.Context) string {
	if ctx.Err() != nil {
		return provider.ReasonTimeout
	}
	return provider.ReasonAPIError
}
