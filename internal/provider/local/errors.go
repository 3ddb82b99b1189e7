package local

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Errors are classified where they arise (provider.Errorf with a class) and
// wrap only adds the provider name and the operation at the boundary, so a
// class is decided once.

// wrap gives err this provider's name and op; class applies only to an err
// that carries none yet.
func (p *Provider) wrap(op string, class, err error) error {
	return provider.Wrap(p.name, op, class, err)
}

// invalidRequest is a request that no retry can fix.
func invalidRequest(format string, args ...any) error {
	return provider.Errorf(provider.ErrPermanent, format, args...)
}

// classifyListen classifies a failed bind other than EADDRINUSE (which the
// allocator handles by moving to the next address).
func classifyListen(addr netip.AddrPort, err error) error {
	switch {
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		// A privileged port without the capability: the same request fails
		// again until the deployment changes.
		return provider.Errorf(provider.ErrPermanent,
			"cannot listen on %s: %v (ports below 1024 need CAP_NET_BIND_SERVICE)", addr, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		// The host's loopback interface does not carry the range (macOS
		// configures only 127.0.0.1): a config problem.
		return provider.Errorf(provider.ErrPermanent,
			"cannot listen on %s: %v (is the bindCIDR routed to the loopback interface?)", addr, err)
	default:
		return provider.Errorf(provider.ErrTransient, "cannot listen on %s: %w", addr, err)
	}
}

// exhausted reports a range with no address left for port. taken counts the
// addresses held by instances, inUse those whose port another process holds.
func exhausted(prefix netip.Prefix, usable, taken, inUse int, port int32) error {
	msg := fmt.Sprintf("no free address in %s (%d usable addresses): %d taken by instances", prefix, usable, taken)
	if inUse > 0 {
		msg += fmt.Sprintf(", port %d already in use on %d more", port, inUse)
	}
	return provider.Errorf(provider.ErrQuotaExceeded, "%s", msg)
}
