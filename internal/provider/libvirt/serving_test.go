package libvirt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// TestGet_ServingSignal: Get reads the guest's report through the fake
// agent (answering as qemu-ga through libvirt does) and says whether the
// proxy answers, and why not.
func TestGet_ServingSignal(t *testing.T) {
	now := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	report := func(r servingreport.Report) map[string]string {
		return map[string]string{servingreport.ReportPath: servingreport.Format(r)}
	}
	for _, tc := range []struct {
		name       string
		files      map[string]string
		agentDown  bool // the address comes from the DHCP lease, the agent is not up
		siteVendor bool
		serving    provider.Serving
		detail     string
		setupErr   string
	}{
		{name: "the reporter says it answers",
			files:   report(servingreport.Report{Serving: true, Checked: now.Add(-5 * time.Second), Answered: now.Add(-5 * time.Second), CloudInit: "done"}),
			serving: provider.ServingAnswering},
		{name: "no report yet", files: map[string]string{},
			serving: provider.ServingNotAnswering, detail: "the guest has not reported yet: cloud-init starts its reporter"},
		{name: "the site's vendor-data replaced the reporter's (as a domain made before it)", files: map[string]string{}, siteVendor: true,
			serving: provider.ServingUnknown},
		{name: "the agent is not up", agentDown: true,
			serving: provider.ServingNotAnswering, detail: "the guest agent does not answer yet"},
		{name: "not yet, cloud-init running",
			files:   report(servingreport.Report{Checked: now.Add(-2 * time.Second), CloudInit: "running"}),
			serving: provider.ServingNotAnswering, detail: "not answering yet (cloud-init: running)"},
		{name: "stopped answering",
			files:   report(servingreport.Report{Checked: now.Add(-2 * time.Second), Answered: now.Add(-40 * time.Second), CloudInit: "done"}),
			serving: provider.ServingNotAnswering, detail: "it last answered at 2026-12-02T20:59:20Z (cloud-init: done)"},
		{name: "cloud-init failed",
			files:   report(servingreport.Report{Checked: now.Add(-2 * time.Second), CloudInit: "error", CloudInitError: "('scripts-user', RuntimeError('x'))"}),
			serving: provider.ServingNotAnswering, detail: "not answering yet (cloud-init: error)", setupErr: "('scripts-user', RuntimeError('x'))"},
		{name: "a report that does not parse", files: map[string]string{servingreport.ReportPath: "hello"},
			serving: provider.ServingNotAnswering, detail: "the guest's report does not parse: no serving= line in 5 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, newImageServer(t), h)
			if tc.siteVendor {
				p.cfg.VendorData = "#cloud-config\n{}\n"
			}
			p.now = func() time.Time { return now }
			name := "proxy-team-a-egress-0123456789"
			addDomain(t, p, name)
			h.mu.Lock()
			d := h.domains[name]
			d.guestFiles = tc.files
			src := libvirt.DomainInterfaceAddressesSrcAgent
			if tc.agentDown {
				src = libvirt.DomainInterfaceAddressesSrcLease
			}
			d.ifaces[src] = []libvirt.DomainInterface{{Name: "eth0", Hwaddr: libvirt.OptString{domainMAC(name)},
				Addrs: []libvirt.DomainIPAddr{{Type: int32(libvirt.IPAddrTypeIpv4), Addr: "192.0.2.50", Prefix: 24}}}}
			h.mu.Unlock()

			inst, err := p.Get(context.Background(), formatID("h1", name))
			if err != nil {
				t.Fatal(err)
			}
			if inst.State != provider.StateRunning || inst.Serving != tc.serving || inst.ServingDetail != tc.detail || inst.SetupError != tc.setupErr {
				t.Errorf("Get: state %s serving %q detail %q setup error %q\nwant serving %q detail %q setup error %q",
					inst.State, inst.Serving, inst.ServingDetail, inst.SetupError, tc.serving, tc.detail, tc.setupErr)
			}
			if tc.serving == provider.ServingUnknown {
				// No reporter in the guest (its metadata says so): no
				// agent command either.
				for _, c := range h.callLog() {
					if strings.HasSuffix(c, ":DomainAgentCommand") {
						t.Errorf("an agent command for a domain without the reporter: %v", h.callLog())
						break
					}
				}
			}
			h.mu.Lock()
			open := len(d.handles)
			h.mu.Unlock()
			if open != 0 {
				t.Errorf("%d guest file handles left open", open)
			}
		})
	}
}

// TestGet_ServingSignalCosts: a running domain's Get costs three agent
// commands (open, read, close); one that has no address yet, none.
func TestGet_ServingSignalCosts(t *testing.T) {
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, newImageServer(t), h)
	name := "proxy-team-a-egress-0123456789"
	addDomain(t, p, name)
	agentCalls := func() int {
		n := 0
		for _, c := range h.callLog() {
			if strings.HasSuffix(c, ":DomainAgentCommand") {
				n++
			}
		}
		return n
	}
	if _, err := p.Get(context.Background(), formatID("h1", name)); err != nil {
		t.Fatal(err)
	}
	if n := agentCalls(); n != 0 {
		t.Errorf("%d agent commands for a domain without an address", n)
	}
	giveAddress(h, name, "192.0.2.50")
	inst, err := p.Get(context.Background(), formatID("h1", name))
	if err != nil || inst.Serving != provider.ServingAnswering {
		t.Fatalf("Get: %+v, %v", inst, err)
	}
	if n := agentCalls(); n != 3 {
		t.Errorf("%d agent commands for a running domain, want 3", n)
	}
}

// addDomain creates name through p and waits for its create step: the
// domain runs, with no address yet.
func addDomain(t *testing.T, p *Provider, name string) {
	t.Helper()
	if _, err := p.Create(context.Background(), testRequest(name)); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, p)
}
