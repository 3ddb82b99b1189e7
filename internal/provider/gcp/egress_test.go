package gcp

import (
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// The egress address Get reports, with the real SDK against the fake: in
// external mode the instance's NAT IP, from the backend, whatever the
// guest's echo says (a differing echo is a note); in internal mode the
// echo's answer from the guest's report, or nothing. A Create that adopts
// a running instance reports it as Get does.
func TestGetReportsTheEgressAddress(t *testing.T) {
	const echoIP = "203.0.113.9" // not the fake's first NAT IP (203.0.113.1)
	for _, tc := range []struct {
		name string
		mode string
		// echo is the report's egress_ip: "" none, "nat" the instance's
		// own NAT IP.
		echo string
		// want: the egress's IP ("nat": the NAT IP), its source, whether
		// Confirmed is the read's time (else the echo's), and a part of
		// its Error ("": none).
		wantIP, wantErr string
		wantSource      provider.EgressSource
		wantReadTime    bool
	}{
		{name: "external, no echo", mode: AddressExternal,
			wantIP: "nat", wantSource: provider.EgressFromBackend, wantReadTime: true},
		{name: "external, echo agrees", mode: AddressExternal, echo: "nat",
			wantIP: "nat", wantSource: provider.EgressFromBackend, wantReadTime: true},
		{name: "external, echo differs", mode: AddressExternal, echo: "198.51.100.20",
			wantIP: "nat", wantSource: provider.EgressFromBackend, wantReadTime: true,
			wantErr: "the echo saw 198.51.100.20: a destination behind a NAT of its own may see another address"},
		{name: "internal, echo", mode: AddressInternal, echo: echoIP,
			wantIP: echoIP, wantSource: provider.EgressFromEcho},
		{name: "internal, no echo", mode: AddressInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := gcptest.New(t)
			clk := &testClock{t: time.Now().Truncate(time.Second)}
			raw := newTestProvider(t, env, func(c *Config) { c.AddressMode = tc.mode })
			raw.now = clk.Now
			p := bounded(raw)
			req := testRequest("egress")
			inst := createRunning(t, p, req)
			nat := env.Fake.Instance(testProject, testZone, req.Name).GetNetworkInterfaces()[0].GetAccessConfigs()
			natIP := ""
			if len(nat) > 0 {
				natIP = nat[0].GetNatIP()
			}
			if (natIP != "") != (tc.mode == AddressExternal) {
				t.Fatalf("the fake's NAT IP in %s mode: %q", tc.mode, natIP)
			}
			resolve := func(ip string) string {
				if ip == "nat" {
					return natIP
				}
				return ip
			}

			confirmed := clk.Now().Add(-30 * time.Second).UTC()
			r := servingreport.Report{Serving: true, Checked: clk.Now(), Answered: clk.Now(), CloudInit: servingreport.CloudInitDone}
			if tc.echo != "" {
				r.EgressIP, r.EgressConfirmed, r.EgressChecked = resolve(tc.echo), confirmed, confirmed
			}
			guestReports(t, env, req.Name, r)
			clk.Add(servingreport.Interval) // past the remembered signal
			want := provider.Egress{IP: resolve(tc.wantIP), Source: tc.wantSource}
			switch {
			case tc.wantSource == "":
			case tc.wantReadTime:
				want.Confirmed = clk.Now()
			default:
				want.Confirmed = confirmed
			}

			got, err := p.Get(t.Context(), inst.ID)
			if err != nil || got.State != provider.StateRunning || got.Serving != provider.ServingAnswering {
				t.Fatalf("Get: %+v, %v; want Running and Answering", got, err)
			}
			check := func(what string, e provider.Egress) {
				t.Helper()
				if e.IP != want.IP || e.Source != want.Source || !e.Confirmed.Equal(want.Confirmed) ||
					(tc.wantErr == "") != (e.Error == "") || !strings.Contains(e.Error, tc.wantErr) {
					t.Errorf("%s's egress %+v; want %+v with error %q", what, e, want, tc.wantErr)
				}
			}
			check("Get", got.Egress)

			// Create of the running instance adopts it and reads it as Get.
			clk.Add(servingreport.Interval)
			if tc.wantReadTime {
				want.Confirmed = clk.Now()
			}
			again, err := p.Create(t.Context(), req)
			if err != nil || again.State != provider.StateRunning {
				t.Fatalf("Create of the running instance: %+v, %v", again, err)
			}
			check("Create", again.Egress)
		})
	}
}

// applyBackendEgress alone: only a running instance in external mode with
// an address, which wins over the echo; the echo's address is compared as
// an address, not as text.
func TestApplyBackendEgress(t *testing.T) {
	read := time.Unix(1764700000, 0)
	echo := func(ip, why string) provider.Egress {
		return provider.Egress{IP: ip, Source: provider.EgressFromEcho, Confirmed: read.Add(-time.Minute), Error: why}
	}
	backend := func(ip, note string) provider.Egress {
		return provider.Egress{IP: ip, Source: provider.EgressFromBackend, Confirmed: read, Error: note}
	}
	for _, tc := range []struct {
		name  string
		mode  string
		state provider.State
		ip    string
		echo  provider.Egress
		want  provider.Egress
	}{
		{"external running", AddressExternal, provider.StateRunning, "192.0.2.10", provider.Egress{}, backend("192.0.2.10", "")},
		{"external, echo failed: the backend's, no note", AddressExternal, provider.StateRunning, "192.0.2.10",
			echo("", "echo: timeout"), backend("192.0.2.10", "")},
		{"external, echo v4-mapped of the same", AddressExternal, provider.StateRunning, "192.0.2.10",
			echo("::ffff:192.0.2.10", ""), backend("192.0.2.10", "")},
		{"external, echo differs", AddressExternal, provider.StateRunning, "192.0.2.10",
			echo("198.51.100.20", ""), backend("192.0.2.10", "the echo saw 198.51.100.20: a destination behind a NAT of its own may see another address")},
		{"external stopped", AddressExternal, provider.StateStopped, "", provider.Egress{}, provider.Egress{}},
		{"external, not an address", AddressExternal, provider.StateRunning, "nat", echo("198.51.100.20", ""), echo("198.51.100.20", "")},
		{"internal: the echo's", AddressInternal, provider.StateRunning, "10.128.0.7", echo("198.51.100.20", ""), echo("198.51.100.20", "")},
		{"internal, no echo", AddressInternal, provider.StateRunning, "10.128.0.7", provider.Egress{}, provider.Egress{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pureProvider(t, func(c *Config) { c.AddressMode = tc.mode })
			inst := provider.Instance{State: tc.state, IP: tc.ip, Egress: tc.echo}
			p.applyBackendEgress(&inst, read)
			if inst.Egress != tc.want {
				t.Errorf("egress %+v, want %+v", inst.Egress, tc.want)
			}
		})
	}
}
