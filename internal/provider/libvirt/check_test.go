package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// newFakeProvider is a provider over fake hosts (in config order).
func newFakeProvider(t *testing.T, hosts ...*fakeHost) *Provider {
	t.Helper()
	return buildFakeProvider(t, Config{SSHKeyFile: "/etc/k", KnownHostsFile: "/etc/kh"}, hosts...)
}

// buildFakeProvider is a provider of cfg over the fake hosts, one config
// host each (on a bridge), dialled through the fakes.
func buildFakeProvider(t *testing.T, cfg Config, hosts ...*fakeHost) *Provider {
	t.Helper()
	fs := fakeHosts{}
	for i, h := range hosts {
		cfg.Hosts = append(cfg.Hosts, Host{Name: h.name, Address: "192.0.2." + string(rune('1'+i)), User: "virt", Bridge: "br0"})
		fs[h.name] = h
	}
	p, err := New("vms", cfg, provider.Options{InstallationID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p.table = newHostTable(fs.connect)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestCheckHealthyHost(t *testing.T) {
	h := newFakeHost("beelink")
	p := newFakeProvider(t, h)
	res := p.Check(context.Background())
	if !res.Healthy || res.Reason != provider.ReasonHealthy {
		t.Fatalf("%+v", res)
	}
	for k, want := range map[string]string{
		"hosts": "1", "hostKeyCheck": "pinned by /etc/kh",
		"beelink.address": "192.0.2.1:22", "beelink.user": "virt", "beelink.pool": "default",
		"beelink.libvirtVersion": "9.0.0", "beelink.hostname": "beelink.example",
		"beelink.domainType": "qemu", "beelink.poolState": "running",
		"beelink.poolCapacityGiB": "100.0", "beelink.poolAvailableGiB": "60.0",
		"beelink.freeMemoryMiB": "8192", "beelink.reason": "Healthy",
	} {
		if got := res.Details[k]; got != want {
			t.Errorf("details[%s] = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(res.Details["beelink.domainTypeReason"], "detected") {
		t.Errorf("domainTypeReason %q does not say it was detected", res.Details["beelink.domainTypeReason"])
	}
	if res.Target != "hosts" || res.Address != "192.0.2.1:22" {
		t.Errorf("target %q address %q", res.Target, res.Address)
	}
	for _, s := range []string{"libvirt 9.0.0 on beelink.example", "domain type qemu", "pool default running with 60.0 of 100.0 GiB free", "8192 MiB memory free"} {
		if !strings.Contains(res.Message, s) {
			t.Errorf("message %q lacks %q", res.Message, s)
		}
	}
}

// The probe runs on a fresh connection, closed when it ends; the pooled
// connection is neither used nor made.
func TestCheckUsesAFreshConnection(t *testing.T) {
	h := newFakeHost("beelink")
	p := newFakeProvider(t, h)
	pooled, err := p.table.get(context.Background(), p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	p.Check(context.Background())
	dials, closes := h.counts()
	if dials != 2 || closes != 1 {
		t.Fatalf("%d dials and %d closes, want 2 (pooled, probe) and 1 (the probe's)", dials, closes)
	}
	assertAlive(t, pooled)
	for _, c := range h.callLog() {
		if strings.HasPrefix(c, "1:") {
			t.Errorf("the check used the pooled connection: %s", c)
		}
	}
}

func TestCheckReasons(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(h *fakeHost)
		reason  string
		message string
		details map[string]string
	}{
		{"pool missing", func(h *fakeHost) { delete(h.pools, DefaultPool) }, ReasonPoolNotFound, "looking up pool default", nil},
		{"pool inactive", func(h *fakeHost) { h.pools[DefaultPool].state = libvirt.StoragePoolInactive }, ReasonPoolNotActive,
			"pool default is inactive, not running", map[string]string{"h1.poolState": "inactive", "h1.libvirtVersion": "9.0.0"}},
		{"credentials", func(h *fakeHost) {
			h.dialErr = newDialError("h1", "192.0.2.1:22", stageCredentials, provider.Errorf(provider.ErrPermanent, "SSH key file /etc/k does not exist"))
		}, ReasonCredentialsUnavailable, "does not exist", map[string]string{"h1.user": "virt"}},
		{"key refused", func(h *fakeHost) {
			h.dialErr = newDialError("h1", "192.0.2.1:22", stageSSH, errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain"))
		}, provider.ReasonUnauthorized, "SSH key refused", nil},
		{"host key mismatch", func(h *fakeHost) {
			h.dialErr = newDialError("h1", "192.0.2.1:22", stageSSH, &knownhosts.KeyError{Want: []knownhosts.KnownKey{{Key: probeKey}}})
		}, provider.ReasonUnauthorized, "SSH host key mismatch", nil},
		{"unknown host", func(h *fakeHost) {
			h.dialErr = newDialError("h1", "192.0.2.1:22", stageSSH, &knownhosts.KeyError{})
		}, provider.ReasonUnauthorized, "SSH unknown host", nil},
		{"unreachable", func(h *fakeHost) {
			h.dialErr = newDialError("h1", "192.0.2.1:22", stageTCP, errors.New("connect: connection refused"))
		}, provider.ReasonUnreachable, "connection refused", nil},
		{"libvirt error", func(h *fakeHost) {
			h.failNext("ConnectGetHostname", lvErr(libvirt.ErrInternalError, "internal error: boom"))
		}, provider.ReasonAPIError, "reading the hostname", map[string]string{"h1.libvirtVersion": "9.0.0"}},
		{"no hypervisor", func(h *fakeHost) {
			h.caps = `<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>`
		}, ReasonHypervisorUnavailable, "offers no QEMU guest for x86_64", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost("h1")
			tc.setup(h)
			res := newFakeProvider(t, h).Check(context.Background())
			if res.Healthy || res.Reason != tc.reason || !strings.Contains(res.Message, tc.message) {
				t.Fatalf("%+v, want reason %s with %q", res, tc.reason, tc.message)
			}
			if res.Details["h1.reason"] != tc.reason {
				t.Errorf("details reason %q", res.Details["h1.reason"])
			}
			for k, want := range tc.details {
				if got := res.Details[k]; got != want {
					t.Errorf("details[%s] = %q, want %q (filled as far as the check got)", k, got, want)
				}
			}
		})
	}
}

// A round whose ctx ends while a host hangs reports Timeout, and Check
// returns with the ctx.
func TestCheckTimeout(t *testing.T) {
	h := newFakeHost("h1")
	gate := h.hold("StoragePoolGetInfo")
	defer gate.open()
	p := newFakeProvider(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan provider.CheckResult, 1)
	go func() { done <- p.Check(ctx) }()
	awaitToken(t, "the probe reaching StoragePoolGetInfo", gate.arrived)
	cancel()
	res := awaitCheck(t, done)
	if res.Reason != provider.ReasonTimeout || res.Details["h1.libvirtVersion"] != "9.0.0" {
		t.Fatalf("%+v, want Timeout with the details gathered so far", res)
	}
}

func awaitCheck(t *testing.T, done <-chan provider.CheckResult) provider.CheckResult {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatal("Check did not return")
		return provider.CheckResult{}
	}
}

// Hosts are probed concurrently: both probes are inside an RPC at once.
func TestCheckProbesHostsConcurrently(t *testing.T) {
	a, b := newFakeHost("a"), newFakeHost("b")
	ga, gb := a.hold("ConnectGetLibVersion"), b.hold("ConnectGetLibVersion")
	p := newFakeProvider(t, a, b)
	done := make(chan provider.CheckResult, 1)
	go func() { done <- p.Check(context.Background()) }()
	awaitToken(t, "host a's probe", ga.arrived)
	awaitToken(t, "host b's probe while a's is held", gb.arrived)
	ga.open()
	gb.open()
	res := awaitCheck(t, done)
	if !res.Healthy {
		t.Fatalf("%+v", res)
	}
}

func TestCheckSeveralHosts(t *testing.T) {
	t.Run("one unhealthy", func(t *testing.T) {
		a, b := newFakeHost("a"), newFakeHost("b")
		delete(b.pools, DefaultPool)
		res := newFakeProvider(t, a, b).Check(context.Background())
		if res.Healthy || res.Reason != provider.ReasonDegraded {
			t.Fatalf("%+v, want Degraded", res)
		}
		if res.Details["a.reason"] != provider.ReasonHealthy || res.Details["b.reason"] != ReasonPoolNotFound || res.Details["hosts"] != "2" {
			t.Errorf("details %v", res.Details)
		}
		if !strings.Contains(res.Message, "1 of 2 hosts unhealthy") || !strings.Contains(res.Message, "host b: PoolNotFound") {
			t.Errorf("message %q", res.Message)
		}
		if res.Address != "192.0.2.1:22, 192.0.2.2:22" {
			t.Errorf("address %q", res.Address)
		}
	})
	t.Run("all unhealthy", func(t *testing.T) {
		a, b := newFakeHost("a"), newFakeHost("b")
		a.pools[DefaultPool].state = libvirt.StoragePoolInactive
		delete(b.pools, DefaultPool)
		res := newFakeProvider(t, a, b).Check(context.Background())
		if res.Reason != ReasonPoolNotActive {
			t.Fatalf("%+v, want the first host's reason", res)
		}
	})
}

// Capabilities documents for the domain type choice: the shape libvirt
// 9.0 writes, trimmed to what is read.
const (
	capsKVMWithVMX = `<capabilities><host><uuid>x</uuid><cpu><arch>x86_64</arch><model>Skylake-Client-IBRS</model><vendor>Intel</vendor>
<feature name='ds'/><feature name='vmx'/><feature name='hypervisor'/></cpu></host>
<guest><os_type>hvm</os_type><arch name='i686'><domain type='qemu'/><domain type='kvm'/></arch></guest>
<guest><os_type>hvm</os_type><arch name='x86_64'><wordsize>64</wordsize><domain type='qemu'/><domain type='kvm'/></arch></guest></capabilities>`
	capsKVMWithSVM = `<capabilities><host><cpu><arch>x86_64</arch><model>EPYC-Rome</model><feature name='svm'/></cpu></host>
<guest><os_type>hvm</os_type><arch name='x86_64'><domain type='qemu'/><domain type='kvm'/></arch></guest></capabilities>`
	// A nested cloud VM with a software /dev/kvm (kvm_pvm): libvirt offers
	// kvm, the CPU has no vmx or svm (this project's test machines).
	capsSoftwareKVM = `<capabilities><host><cpu><arch>x86_64</arch><model>Skylake-Server-IBRS</model><feature name='hypervisor'/></cpu></host>
<guest><os_type>hvm</os_type><arch name='x86_64'><domain type='qemu'/><domain type='kvm'/></arch></guest></capabilities>`
	capsOtherArchOnly = `<capabilities><host><cpu><arch>x86_64</arch></cpu></host>
<guest><os_type>hvm</os_type><arch name='aarch64'><domain type='qemu'/></arch></guest></capabilities>`
)

func TestChooseDomainType(t *testing.T) {
	for _, tc := range []struct {
		name, configured, caps, want, why, err string
	}{
		{"vmx", "", capsKVMWithVMX, DomainTypeKVM, "CPU has vmx", ""},
		{"svm", "", capsKVMWithSVM, DomainTypeKVM, "CPU has svm", ""},
		{"software kvm", "", capsSoftwareKVM, DomainTypeQEMU, "neither vmx nor svm", ""},
		{"no kvm", "", capsQEMUOnly, DomainTypeQEMU, "no kvm guest", ""},
		{"configured qemu on kvm host", DomainTypeQEMU, capsKVMWithVMX, DomainTypeQEMU, "configured", ""},
		{"configured kvm trusted", DomainTypeKVM, capsSoftwareKVM, DomainTypeKVM, "configured", ""},
		{"configured kvm not offered", DomainTypeKVM, capsQEMUOnly, "", "", "domainType kvm is configured, but libvirt offers no kvm guest for x86_64 here (is /dev/kvm present"},
		{"other arch only", "", capsOtherArchOnly, "", "", "offers no QEMU guest for x86_64"},
		{"not xml", "", "<capabilities", "", "", "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := chooseDomainType(tc.configured, tc.caps)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("= %q, %q, %v; want %q with %q", got, why, err, tc.want, tc.why)
			}
		})
	}
}

func TestFormatLibvirtVersion(t *testing.T) {
	for v, want := range map[uint64]string{9000000: "9.0.0", 10010002: "10.10.2", 1002003: "1.2.3"} {
		if got := formatLibvirtVersion(v); got != want {
			t.Errorf("formatLibvirtVersion(%d) = %q, want %q", v, got, want)
		}
	}
}
