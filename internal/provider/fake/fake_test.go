package fake_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

const providerName = "fake-under-test"

// hook is the conformance suite's hand on the fake's backend, over the
// fake's own knobs, so that the suite also proves the knobs behave like a
// backend.
type hook struct{ p *fake.Provider }

func nameOf(t *testing.T, id string) string {
	t.Helper()
	name, ok := strings.CutPrefix(id, "fake/")
	if !ok {
		t.Fatalf("not a fake ID: %q", id)
	}
	return name
}

func (h hook) Vanish(t *testing.T, id string) {
	if !h.p.Remove(nameOf(t, id)) {
		t.Fatalf("Vanish(%q): no such instance", id)
	}
}

func (h hook) Plant(_ *testing.T, name string, marks *provider.Marks) {
	h.p.Backend().Plant(name, marks)
}
func (h hook) FailNext(_ *testing.T, op string, class error) { h.p.FailNext(op, class) }
func (h hook) Block(_ *testing.T, op string) func()          { return h.p.Block(op) }

func (h hook) Inspect(_ *testing.T, name string) (*provider.Marks, bool) {
	r, ok := h.p.Backend().Lookup(name)
	return r.Marks, ok
}

func (h hook) Stop(t *testing.T, id string) {
	if !h.p.SetState(nameOf(t, id), provider.StateStopped) {
		t.Fatalf("Stop(%q): no such instance", id)
	}
}

var (
	_ providertest.Inspector = hook{}
	_ providertest.Stopper   = hook{}
)

func request(proxyName, uid string) provider.CreateRequest {
	return provider.CreateRequest{
		Name: provider.InstanceName("default", proxyName, uid, "fake"), Namespace: "default",
		ProxyName: proxyName, UID: uid, Port: 3128,
	}
}

func harness(configure func(p *fake.Provider)) providertest.Harness {
	return providertest.Harness{
		Name: providerName,
		New: func(_ *testing.T, installation string) (provider.Provider, providertest.Backend) {
			p := fake.New(providerName, fake.NewBackend(), provider.Options{InstallationID: installation})
			configure(p)
			return p, withSlow(hook{p}, installation, configure) // slow_test.go
		},
		Request:       func(_ *testing.T, proxyName, uid string) provider.CreateRequest { return request(proxyName, uid) },
		StaticAddress: providertest.DocumentationStaticAddress(),
	}
}

// TestConformance runs the contract suite on the fake in both profiles the
// contract allows: Create and Delete that finish before returning, and ones
// that return early and let Get catch up.
func TestConformance(t *testing.T) {
	t.Run("blocking", func(t *testing.T) {
		providertest.Run(t, harness(func(*fake.Provider) {}))
	})
	t.Run("returns early", func(t *testing.T) {
		providertest.Run(t, harness(func(p *fake.Provider) {
			p.SetProvisioningGets(2)
			p.SetDeleteReturnsEarly(2)
		}))
	})
}

// newFake is one provider of installation "inst-a" on a fresh backend.
func newFake(t *testing.T) *fake.Provider {
	t.Helper()
	return fake.New(providerName, nil, provider.Options{InstallationID: "inst-a"})
}

func mustCreate(t *testing.T, p *fake.Provider, req provider.CreateRequest) provider.Instance {
	t.Helper()
	inst, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create(%q): %v", req.Name, err)
	}
	return inst
}

func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	if !errors.Is(err, class) || provider.ClassOf(err) != class {
		t.Errorf("%s: error %v, want class %s", what, err, provider.ClassName(class))
	}
}

var pool = &net.IPNet{IP: net.IPv4(127, 0, 200, 0), Mask: net.CIDRMask(24, 32)}

func TestProvisioningGets(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := newFake(t)
			p.SetProvisioningGets(n)
			created := mustCreate(t, p, request("web", "u1"))
			wantCreated := provider.StateRunning
			if n > 0 {
				wantCreated = provider.StateProvisioning
			}
			if created.State != wantCreated {
				t.Errorf("Create state = %q, want %q", created.State, wantCreated)
			}
			for i := 1; i <= n+2; i++ {
				got, err := p.Get(t.Context(), created.ID)
				if err != nil {
					t.Fatalf("Get #%d: %v", i, err)
				}
				want := provider.StateRunning
				if i <= n {
					want = provider.StateProvisioning
				}
				if got.State != want {
					t.Errorf("Get #%d state = %q, want %q", i, got.State, want)
				}
				if running := got.State == provider.StateRunning; running != (got.IP != "") {
					t.Errorf("Get #%d: state %q with IP %q; IP is set exactly when Running", i, got.State, got.IP)
				}
				if got.IP != "" && !pool.Contains(net.ParseIP(got.IP)) {
					t.Errorf("Get #%d: IP %q outside %v", i, got.IP, pool)
				}
			}
		})
	}
}

func TestDeleteReturnsEarly(t *testing.T) {
	for _, n := range []int{0, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := newFake(t)
			p.SetDeleteReturnsEarly(n)
			req := request("web", "u1")
			inst := mustCreate(t, p, req)
			if err := p.Delete(t.Context(), inst.ID); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			for i := 1; i <= n; i++ {
				got, err := p.Get(t.Context(), inst.ID)
				if err != nil || got.State != provider.StateTerminated || got.IP != "" {
					t.Errorf("Get #%d while deleting = %+v, %v; want Terminated without IP", i, got, err)
				}
				if list, err := p.ListByTag(t.Context()); err != nil || len(list) != 1 {
					t.Errorf("ListByTag while deleting lists %d, %v; want the deleting instance", len(list), err)
				}
				_, err = p.Create(t.Context(), req)
				wantClass(t, "Create of a name being deleted", err, provider.ErrTransient)
			}
			_, err := p.Get(t.Context(), inst.ID)
			wantClass(t, fmt.Sprintf("Get #%d after Delete", n+1), err, provider.ErrNotFound)
			if list, err := p.ListByTag(t.Context()); err != nil || len(list) != 0 {
				t.Errorf("ListByTag after the delete finished lists %+v, %v; want none", list, err)
			}
			if _, ok := p.Backend().Lookup(req.Name); ok {
				t.Errorf("backend still holds %q", req.Name)
			}
		})
	}
}

// Two installations on one backend never see, adopt or delete each
// other's instances.
func TestInstallationsShareBackend(t *testing.T) {
	b := fake.NewBackend()
	pa := fake.New("a", b, provider.Options{InstallationID: "inst-a"})
	pb := fake.New("b", b, provider.Options{InstallationID: "inst-b"})
	reqA, reqB := request("web", "ua"), request("web", "ub")
	ia, ib := mustCreate(t, pa, reqA), mustCreate(t, pb, reqB)

	for _, tc := range []struct {
		name         string
		self, other  *fake.Provider
		mine, theirs provider.Instance
		theirReq     provider.CreateRequest
	}{
		{"a", pa, pb, ia, ib, reqB},
		{"b", pb, pa, ib, ia, reqA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := tc.self.ListByTag(t.Context())
			if err != nil || len(list) != 1 || list[0].ID != tc.mine.ID {
				t.Errorf("ListByTag = %+v, %v; want only %q", list, err, tc.mine.ID)
			}
			_, err = tc.self.Get(t.Context(), tc.theirs.ID)
			wantClass(t, "Get of the other installation's instance", err, provider.ErrNotFound)
			_, err = tc.self.Create(t.Context(), tc.theirReq)
			wantClass(t, "Create over the other installation's instance", err, provider.ErrPermanent)
			if err := tc.self.Delete(t.Context(), tc.theirs.ID); err != nil {
				t.Errorf("Delete of the other installation's instance: %v, want success", err)
			}
			if _, err := tc.other.Get(t.Context(), tc.theirs.ID); err != nil {
				t.Errorf("the other installation lost its instance: %v", err)
			}
		})
	}
	if n := len(b.Records()); n != 2 {
		t.Errorf("backend holds %d instances, want 2: %v", n, b.Records())
	}
}

func TestAdoption(t *testing.T) {
	for _, tc := range []struct {
		name    string
		marks   *provider.Marks
		wantErr error
		wantUID string
	}{
		{"ours", &provider.Marks{Managed: true, UID: "u1", Installation: "inst-a"}, nil, "u1"},
		{"ours, UID not yet written", &provider.Marks{Managed: true, Installation: "inst-a"}, nil, "u1"},
		{"unmarked", nil, provider.ErrPermanent, ""},
		{"no managed mark", &provider.Marks{UID: "u1", Installation: "inst-a"}, provider.ErrPermanent, "u1"},
		{"other installation", &provider.Marks{Managed: true, UID: "u1", Installation: "inst-b"}, provider.ErrPermanent, "u1"},
		{"other Proxy", &provider.Marks{Managed: true, UID: "u2", Installation: "inst-a"}, provider.ErrPermanent, "u2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFake(t)
			req := request("web", "u1")
			planted := p.Backend().Plant(req.Name, tc.marks)
			inst, err := p.Create(t.Context(), req)
			if tc.wantErr != nil {
				wantClass(t, "Create", err, tc.wantErr)
			} else if err != nil || inst.ID != fake.ID(req.Name) || !inst.CreatedAt.Equal(planted.CreatedAt) {
				t.Errorf("Create = %+v, %v; want the planted %v adopted", inst, err, planted)
			}
			r, _ := p.Backend().Lookup(req.Name)
			if got := r.Marks; (got == nil) != (tc.marks == nil) || (got != nil && got.UID != tc.wantUID) {
				t.Errorf("marks after Create = %+v, want UID %q", got, tc.wantUID)
			}
		})
	}
}

func TestScriptedErrors(t *testing.T) {
	p := newFake(t)
	ctx := t.Context()
	p.FailNext(provider.OpList, provider.ErrQuotaExceeded)
	p.FailNext(provider.OpList, errors.New("connection reset"))
	p.SetError(provider.OpList, provider.Errorf(provider.ErrPermanent, "forbidden"))

	for i, want := range []error{provider.ErrQuotaExceeded, provider.ErrTransient, provider.ErrPermanent, provider.ErrPermanent} {
		_, err := p.ListByTag(ctx)
		wantClass(t, fmt.Sprintf("ListByTag #%d", i+1), err, want)
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Provider != providerName || pe.Op != provider.OpList {
			t.Errorf("ListByTag #%d error %v does not name %q and %q", i+1, err, providerName, provider.OpList)
		}
	}
	if got := p.Calls(provider.OpList); got != 4 {
		t.Errorf("Calls(list) = %d, want 4: failed calls count", got)
	}
	p.SetError(provider.OpList, nil)
	if _, err := p.ListByTag(ctx); err != nil {
		t.Errorf("ListByTag after SetError(nil): %v", err)
	}
	p.SetError(provider.OpCreate, provider.ErrQuotaExceeded)
	p.Reset()
	if _, err := p.Create(ctx, request("web", "u1")); err != nil {
		t.Errorf("Create after Reset: %v; Reset clears SetError", err)
	}
}

func TestBlock(t *testing.T) {
	t.Run("release", func(t *testing.T) {
		p := newFake(t)
		release := p.Block(provider.OpList)
		done := make(chan error, 1)
		go func() { _, err := p.ListByTag(t.Context()); done <- err }()
		testenv.Eventually(t, "the call to park", func() bool { return p.Calls(provider.OpList) == 1 })
		select {
		case err := <-done:
			t.Fatalf("ListByTag returned %v while blocked", err)
		case <-time.After(20 * time.Millisecond):
		}
		release()
		release() // idempotent
		if err := <-done; err != nil {
			t.Errorf("released ListByTag: %v", err)
		}
		if _, err := p.ListByTag(t.Context()); err != nil {
			t.Errorf("ListByTag after release: %v", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		p := newFake(t)
		defer p.Block(provider.OpCheck)()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		if r := p.Check(ctx); r.Healthy || r.Reason != provider.ReasonTimeout {
			t.Errorf("blocked Check past its deadline = %+v, want not Healthy, Timeout", r)
		}
	})
	t.Run("reset releases", func(t *testing.T) {
		p := newFake(t)
		release := p.Block(provider.OpGet)
		done := make(chan error, 1)
		go func() { _, err := p.Get(t.Context(), fake.ID("nothing")); done <- err }()
		testenv.Eventually(t, "the call to park", func() bool { return p.Calls(provider.OpGet) == 1 })
		p.Reset()
		wantClass(t, "Get released by Reset", <-done, provider.ErrNotFound)
		release() // after Reset: must not panic
	})
}

func TestRecordsAndReset(t *testing.T) {
	p := newFake(t)
	req := request("web", "u1")
	req.CloudInit = "#cloud-config\n"
	req.AllowedSourceRanges = []string{"10.0.0.0/8"}
	p.FailNext(provider.OpCreate, provider.ErrTransient)
	if _, err := p.Create(t.Context(), req); err == nil {
		t.Fatal("scripted failure not returned")
	}
	inst := mustCreate(t, p, req)
	got := p.CreateRequests()
	if len(got) != 2 || got[0].Name != req.Name || got[1].CloudInit.Reveal() != req.CloudInit.Reveal() {
		t.Errorf("CreateRequests = %+v, want both requests, the failed one included", got)
	}
	got[0].AllowedSourceRanges[0] = "mutated"
	if p.CreateRequests()[0].AllowedSourceRanges[0] != "10.0.0.0/8" {
		t.Error("CreateRequests shares its slices with the caller")
	}
	p.SetProvisioningGets(5)
	p.Reset()
	if n := p.Calls(provider.OpCreate); n != 0 || len(p.CreateRequests()) != 0 {
		t.Errorf("after Reset: Calls(create) = %d, %d requests; want none", n, len(p.CreateRequests()))
	}
	if again := mustCreate(t, p, request("other", "u2")); again.State != provider.StateRunning {
		t.Errorf("after Reset Create gives %q, want Running: Reset clears ProvisioningGets", again.State)
	}
	if _, err := p.Get(t.Context(), inst.ID); err != nil {
		t.Errorf("instance lost by Reset: %v; Reset keeps the backend", err)
	}
}

func TestWorldActsBehindTheProvider(t *testing.T) {
	p := newFake(t)
	req := request("web", "u1")
	inst := mustCreate(t, p, req)
	if !p.SetState(req.Name, provider.StateStopped) {
		t.Fatal("SetState of an existing instance reported false")
	}
	if got, err := p.Get(t.Context(), inst.ID); err != nil || got.State != provider.StateStopped || got.IP != "" {
		t.Errorf("Get after SetState(Stopped) = %+v, %v; want Stopped without IP", got, err)
	}
	if again := mustCreate(t, p, req); again.State != provider.StateRunning || again.IP == "" {
		t.Errorf("Create over the stopped instance = %+v, want it started", again)
	}
	p.SetState(req.Name, provider.StateProvisioning)
	for range 3 {
		if got, err := p.Get(t.Context(), inst.ID); err != nil || got.State != provider.StateProvisioning {
			t.Errorf("Get after SetState(Provisioning) = %q, %v; it holds until changed", got.State, err)
		}
	}
	if !p.Remove(req.Name) || p.Remove(req.Name) || p.SetState(req.Name, provider.StateRunning) {
		t.Error("Remove or SetState misreport existence")
	}
	_, err := p.Get(t.Context(), inst.ID)
	wantClass(t, "Get after Remove", err, provider.ErrNotFound)
}

func TestAddressPoolIsQuota(t *testing.T) {
	p := newFake(t)
	seen := map[string]bool{}
	var first provider.Instance
	for i := range 254 {
		inst := mustCreate(t, p, request(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i)))
		if seen[inst.IP] || !pool.Contains(net.ParseIP(inst.IP)) {
			t.Fatalf("instance %d got IP %q: reused or outside %v", i, inst.IP, pool)
		}
		seen[inst.IP] = true
		if i == 0 {
			first = inst
		}
	}
	_, err := p.Create(t.Context(), request("one-too-many", "u-x"))
	wantClass(t, "Create with the address pool full", err, provider.ErrQuotaExceeded)
	if err := p.Delete(t.Context(), first.ID); err != nil {
		t.Fatal(err)
	}
	if inst := mustCreate(t, p, request("one-too-many", "u-x")); inst.IP != first.IP {
		t.Errorf("freed address %q not reused, got %q", first.IP, inst.IP)
	}
}

func TestClockAndCheck(t *testing.T) {
	p := newFake(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p.Backend().SetClock(func() time.Time { return at })
	mustCreate(t, p, request("web", "u1"))
	if list, err := p.ListByTag(t.Context()); err != nil || len(list) != 1 || !list[0].CreatedAt.Equal(at) || list[0].State != "" {
		t.Errorf("ListByTag = %+v, %v; want one instance created at %v with no state", list, err, at)
	}

	if r := p.Check(t.Context()); !r.Healthy || r.Reason != provider.ReasonHealthy {
		t.Errorf("default Check = %+v", r)
	}
	p.SetCheckResult(provider.CheckResult{Reason: provider.ReasonDegraded, Details: map[string]string{"free": "1"}})
	if r := p.Check(t.Context()); r.Healthy || r.Reason != provider.ReasonDegraded || r.Details["free"] != "1" {
		t.Errorf("Check after SetCheckResult = %+v", r)
	}
	p.FailNext(provider.OpCheck, errors.New("boom"))
	if r := p.Check(t.Context()); r.Healthy || r.Reason != provider.ReasonAPIError {
		t.Errorf("Check with a scripted failure = %+v, want APIError", r)
	}
}

func TestCreateRejectsBadRequests(t *testing.T) {
	p := newFake(t)
	for _, req := range []provider.CreateRequest{
		{Name: "", UID: "u"}, {Name: "Upper", UID: "u"}, {Name: strings.Repeat("a", 64), UID: "u"}, {Name: "ok", UID: ""},
	} {
		_, err := p.Create(t.Context(), req)
		wantClass(t, fmt.Sprintf("Create(%q, uid %q)", req.Name, req.UID), err, provider.ErrPermanent)
	}
	if n := len(p.Backend().Records()); n != 0 {
		t.Errorf("rejected requests left %d instances", n)
	}
}
