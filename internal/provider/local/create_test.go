package local

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func TestCreateValidatesRequest(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	cases := []struct {
		name string
		edit func(*provider.CreateRequest)
		want []string
	}{
		{"empty name", func(r *provider.CreateRequest) { r.Name = "" }, []string{"name is empty"}},
		{"name with a slash", func(r *provider.CreateRequest) { r.Name = "a/b" }, []string{`name "a/b"`}},
		{"port zero", func(r *provider.CreateRequest) { r.Port = 0 }, []string{"port 0 is outside 1-65535"}},
		{"port too high", func(r *provider.CreateRequest) { r.Port = 65536 }, []string{"port 65536"}},
		{"negative port", func(r *provider.CreateRequest) { r.Port = -1 }, []string{"port -1"}},
		{
			"bad range names the entry",
			func(r *provider.CreateRequest) {
				r.AllowedSourceRanges = []string{"10.0.0.0/8", "10.0.0.0/33", "office"}
			},
			[]string{`allowedSourceRanges[1]: Invalid value: "10.0.0.0/33": must be a CIDR`, `allowedSourceRanges[2]: Invalid value: "office"`},
		},
		{
			"every problem at once",
			func(r *provider.CreateRequest) { r.Name, r.Port, r.AllowedSourceRanges = "", 0, []string{"x"} },
			[]string{"name is empty", "port 0", `allowedSourceRanges[0]: Invalid value: "x"`},
		},
		{
			"range with host bits names the canonical one",
			func(r *provider.CreateRequest) { r.AllowedSourceRanges = []string{"10.0.0.1/8"} },
			[]string{`allowedSourceRanges[0]: Invalid value: "10.0.0.1/8": has host bits set: write 10.0.0.0/8`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := request("valid")
			tc.edit(&req)
			_, err := bounded(p).Create(context.Background(), req)
			wantClass(t, "Create", err, provider.ErrPermanent)
			if err == nil {
				return
			}
			wantProviderError(t, err, provider.OpCreate)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if list, _ := p.ListByTag(context.Background()); len(list) != 0 {
		t.Errorf("refused requests left instances: %+v", list)
	}
}

func TestCreateRunsAtOnceOnDistinctAddresses(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	a := mustCreate(t, p, request("a"))
	b := mustCreate(t, p, request("b"))
	for _, inst := range []provider.Instance{a, b} {
		if inst.State != provider.StateRunning || inst.IP == "" {
			t.Errorf("Create returned %+v, want Running with an IP", inst)
		}
		if !p.cidr.Contains(mustAddr(t, inst.IP)) {
			t.Errorf("IP %s is outside %s", inst.IP, p.cidr)
		}
	}
	if a.IP == b.IP {
		t.Errorf("two instances share IP %s", a.IP)
	}
	// The lowest free address first: the network address is skipped.
	if want := p.cidr.Addr().Next().String(); a.IP != want {
		t.Errorf("first instance got %s, want %s", a.IP, want)
	}
	if a.UID != "uid-a" || a.CreatedAt.IsZero() || a.ID != instanceID(request("a").Name) {
		t.Errorf("Create returned %+v", a)
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	first := mustCreate(t, p, request("idem"))
	second := mustCreate(t, p, request("idem"))
	if first != second {
		t.Errorf("second Create = %+v, want the first %+v", second, first)
	}
}

// Adoption follows provider.CheckAdoption: only our installation's managed
// mark with the same or an empty UID is adopted.
func TestCreateAdoption(t *testing.T) {
	req := request("adopt")
	cases := []struct {
		name    string
		marks   *provider.Marks
		adopted bool
		want    string
	}{
		{"same UID", &provider.Marks{Managed: true, UID: req.UID, Installation: testInstallation}, true, ""},
		{"empty UID", &provider.Marks{Managed: true, Installation: testInstallation}, true, ""},
		{"no marks", nil, false, "not managed by this operator"},
		{"unmanaged", &provider.Marks{UID: req.UID, Installation: testInstallation}, false, "not managed by this operator"},
		{"other installation", &provider.Marks{Managed: true, UID: req.UID, Installation: "other"}, false, "another operator installation"},
		{"other UID", &provider.Marks{Managed: true, UID: "uid-x", Installation: testInstallation}, false, "another Proxy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProvider(t, testInstallation, 24)
			plant(t, p, req.Name, tc.marks, testPort())
			inst, err := p.Create(context.Background(), req)
			if !tc.adopted {
				wantClass(t, "Create", err, provider.ErrPermanent)
				if err != nil && !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q does not say %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create did not adopt: %v", err)
			}
			if inst.State != provider.StateRunning || inst.UID != req.UID {
				t.Errorf("adopted %+v, want Running with UID %q (an empty UID mark is completed)", inst, req.UID)
			}
		})
	}
}

// A recorded instance with no listener reads Stopped; Create adopts it and
// starts it, under the request's port.
func TestCreateStartsAdoptedStoppedInstance(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	req := request("stopped")
	plant(t, p, req.Name, &provider.Marks{Managed: true, UID: req.UID, Installation: testInstallation}, 0)
	got, err := p.Get(context.Background(), instanceID(req.Name))
	if err != nil || got.State != provider.StateStopped || got.IP != "" {
		t.Fatalf("Get of a record with no listener = %+v, %v; want Stopped without IP", got, err)
	}
	inst := mustCreate(t, p, req)
	if inst.State != provider.StateRunning {
		t.Fatalf("Create over a stopped instance = %+v, want Running", inst)
	}
	conn, err := net.Dial("tcp4", net.JoinHostPort(inst.IP, itoa(req.Port)))
	if err != nil {
		t.Fatalf("the started instance does not accept: %v", err)
	}
	conn.Close()
}

// A listener that died on its own reads Stopped and is started again by
// Create.
func TestDeadListenerReadsStoppedAndRestarts(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	req := request("dies")
	inst := mustCreate(t, p, req)
	p.mu.Lock()
	srv := p.instances[req.Name].srv
	p.mu.Unlock()
	_ = srv.ln.Close() // behind the server's back: Serve returns on its own
	<-srv.stopped
	got, err := p.Get(context.Background(), inst.ID)
	if err != nil || got.State != provider.StateStopped {
		t.Fatalf("Get after the listener died = %+v, %v; want Stopped", got, err)
	}
	again := mustCreate(t, p, req)
	if again.State != provider.StateRunning {
		t.Errorf("Create after the listener died = %+v, want Running", again)
	}
}

// The watcher (provider.InstanceWatcher) is told of a listener that died
// on its own, at once, and not of one that Delete closed: its caller knows.
func TestWatchInstancesToldOfADeadListenerOnly(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	changed := make(chan string, 4)
	p.WatchInstances(func(id string) { changed <- id })
	dies, deleted := mustCreate(t, p, request("dies")), mustCreate(t, p, request("deleted"))

	if err := p.Delete(context.Background(), deleted.ID); err != nil {
		t.Fatal(err)
	}
	// Delete returned once its server had drained: a callback would have
	// run by now.
	if len(changed) != 0 {
		t.Fatalf("told of %q, closed by Delete", <-changed)
	}
	if !p.StopListener(dies.ID) { // behind the server's back
		t.Fatalf("no listener for %s", dies.ID)
	}
	select {
	case id := <-changed:
		if id != dies.ID {
			t.Fatalf("told of %q, want %q", id, dies.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not told of the listener that died")
	}
}

// A range with no address left is QuotaExceeded, naming the range and its
// size. 127.x.y.0/30 has three usable addresses.
func TestCreateExhaustsRange(t *testing.T) {
	p := newTestProvider(t, testInstallation, 30)
	for _, name := range []string{"q1", "q2", "q3"} {
		mustCreate(t, p, request(name))
	}
	_, err := bounded(p).Create(context.Background(), request("q4"))
	wantClass(t, "Create in a full range", err, provider.ErrQuotaExceeded)
	if err == nil {
		return
	}
	wantProviderError(t, err, provider.OpCreate)
	for _, want := range []string{p.cidr.String(), "3 usable addresses", "3 taken by instances"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	// Deleting one frees its address for the next.
	list, _ := p.ListByTag(context.Background())
	if err := p.Delete(context.Background(), list[0].ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	mustCreate(t, p, request("q4"))
}

// Another process holding the port on the lowest address moves Create to
// the next one.
func TestCreateSkipsAddressWithPortInUse(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	first := p.cidr.Addr().Next()
	squatter, err := net.Listen("tcp4", net.JoinHostPort(first.String(), itoa(testPort())))
	if err != nil {
		t.Fatalf("squatting %s: %v", first, err)
	}
	defer squatter.Close()
	inst := mustCreate(t, p, request("squat"))
	if want := first.Next().String(); inst.IP != want {
		t.Errorf("Create got %s, want %s (the squatted %s skipped)", inst.IP, want, first)
	}
}

// In a /30 whose every address has the port taken by someone else, the
// error says so.
func TestCreateReportsPortInUseEverywhere(t *testing.T) {
	p := newTestProvider(t, testInstallation, 30)
	for a := p.cidr.Addr().Next(); p.cidr.Contains(a); a = a.Next() {
		ln, err := net.Listen("tcp4", net.JoinHostPort(a.String(), itoa(testPort())))
		if err != nil {
			t.Fatalf("squatting %s: %v", a, err)
		}
		defer ln.Close()
	}
	_, err := p.Create(context.Background(), request("nowhere"))
	wantClass(t, "Create", err, provider.ErrQuotaExceeded)
	if err != nil && !strings.Contains(err.Error(), "already in use on 3 more") {
		t.Errorf("error %q does not say the port is in use", err)
	}
}

// TestBindTakesTheLowestFreeAddress: an address an instance gave up is
// the next one taken, and so is one another process held when it is free
// again; bind starts its scan past the held addresses, not at the range's
// first.
func TestBindTakesTheLowestFreeAddress(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	ctx := context.Background()
	ip := func(name string) string { return mustCreate(t, p, request(name)).IP }
	base := p.cidr.Addr()
	at := func(i int) string {
		a := base
		for ; i > 0; i-- {
			a = a.Next()
		}
		return a.String()
	}
	for i, name := range []string{"a", "b", "c"} {
		if got := ip(name); got != at(i+1) {
			t.Fatalf("%s at %s, want %s", name, got, at(i+1))
		}
	}
	if err := p.Delete(ctx, instanceID(request("b").Name)); err != nil {
		t.Fatal(err)
	}
	if got := ip("d"); got != at(2) {
		t.Errorf("after b's delete: d at %s, want b's %s", got, at(2))
	}
	// Something else listens on the next free address, on the instances' port.
	other, err := net.Listen("tcp4", net.JoinHostPort(at(4), itoa(testPort())))
	if err != nil {
		t.Fatal(err)
	}
	if got := ip("e"); got != at(5) {
		t.Errorf("e at %s, want %s (past the address in use)", got, at(5))
	}
	_ = other.Close()
	if got := ip("f"); got != at(4) {
		t.Errorf("f at %s, want %s (free again)", got, at(4))
	}
	if got := ip("g"); got != at(6) {
		t.Errorf("g at %s, want %s", got, at(6))
	}
}

// TestServerKeepsLoggerOnlyWhenItWouldWrite: an instance created under a
// logger that drops V(1) keeps none (every line a server writes is V(1)
// or V(2), and a kept logger pins the Create's); under a verbose one it
// keeps it, and its lines carry the address.
func TestServerKeepsLoggerOnlyWhenItWouldWrite(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	srvOf := func(inst provider.Instance) *server {
		p.mu.Lock()
		defer p.mu.Unlock()
		name, _ := parseID(inst.ID)
		return p.instances[name].srv
	}
	quiet, _ := logCtx(0)
	inst, err := p.Create(quiet, request("quiet"))
	if err != nil {
		t.Fatal(err)
	}
	if srvOf(inst).log.GetSink() != nil {
		t.Error("an instance created at verbosity 0 keeps a logger")
	}
	loud, lines := logCtx(2)
	inst, err = p.Create(loud, request("loud"))
	if err != nil {
		t.Fatal(err)
	}
	srvOf(inst).log.V(1).Info("probe")
	if !strings.Contains(lines.String(), "probe") || !strings.Contains(lines.String(), inst.IP) {
		t.Errorf("a verbose instance's line lacks its address: %s", lines.String())
	}
}
