package proxmox

import (
	"context"
	"net/http"
)

type opKey struct{}

// The background steps' requests carry their own op names, so a fault
// meant for a call's own request is not taken by a step running meanwhile.
const (
	opCreateStep = "create-step"
	opDeleteStep = "delete-step"
)

// withOp records the provider operation a request serves (tests' wire
// seam reads it to fail or hold one operation's calls).
func withOp(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

func opOf(ctx context.Context) string { s, _ := ctx.Value(opKey{}).(string); return s }

// setWire installs a RoundTripper wrapper under the instrumented transport
// (tests only); it drops the built client.
func (p *Provider) setWire(w func(http.RoundTripper) http.RoundTripper) {
	p.api.mu.Lock()
	p.api.wrap, p.api.hc = w, nil
	p.api.mu.Unlock()
}
