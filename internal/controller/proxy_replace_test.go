package controller

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// The pure transitions, one row each.
func TestReshapeTransitions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      record
		desired string
		want    record
	}{
		{"unchanged", record{current: "a", currentName: "A", serving: true}, "A",
			record{current: "a", currentName: "A", serving: true}},
		{"serving instance retires", record{current: "a", currentName: "A", serving: true}, "B",
			record{retiring: "a", retiringName: "A", serving: true}},
		{"never-served instance is superseded", record{current: "a", currentName: "A"}, "B",
			record{superseded: []string{"a"}}},
		{"revert during a replacement", record{current: "b", currentName: "B", retiring: "a", retiringName: "A", serving: true}, "A",
			record{current: "a", currentName: "A", superseded: []string{"b"}, serving: true}},
		{"third shape during a replacement", record{current: "b", currentName: "B", retiring: "a", retiringName: "A", serving: true}, "C",
			record{retiring: "a", retiringName: "A", superseded: []string{"b"}, serving: true}},
		{"change after cutover, old still deleting", record{current: "b", currentName: "B", superseded: []string{"a"}, serving: true}, "C",
			record{retiring: "b", retiringName: "B", superseded: []string{"a"}, serving: true}},
		{"nothing recorded", record{}, "A", record{}},
		{"replacement lost, retiring serves", record{retiring: "a", retiringName: "A", serving: true}, "B",
			record{retiring: "a", retiringName: "A", serving: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reshape(tc.in, tc.desired); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("reshape(%+v, %s) = %+v, want %+v", tc.in, tc.desired, got, tc.want)
			}
		})
	}
	// A pool address: the serving instance goes before its successor is
	// made, and nothing serves meanwhile.
	got := release(reshape(record{current: "a", currentName: "A", serving: true}, "B"))
	if want := (record{superseded: []string{"a"}}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("release after reshape = %+v, want %+v", got, want)
	}
	got = cutover(record{current: "b", currentName: "B", retiring: "a", retiringName: "A", serving: true})
	if want := (record{current: "b", currentName: "B", superseded: []string{"a"}, serving: true}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cutover = %+v, want %+v", got, want)
	}
}

// TestReplacementNeverCutsOffServingProxy (issue 7 item 1) walks the
// reconciler through every ordering of spec changes (a revert before and
// after the replacement runs, a third shape during a replacement and after
// its cutover), a Transient provider error before each pass, and a crash
// (the pass's status write lost, a fresh reconciler after it) at each pass.
// After every pass: the instance at status.endpoint was deleted only if its
// successor already ran, at most one instance is unrecorded, and Ready is
// True exactly when a running instance serves at the endpoint. In the end
// the Proxy converges to one instance of the last shape.
func TestReplacementNeverCutsOffServingProxy(t *testing.T) {
	scenarios := map[string][]string{
		"plain replacement":                  {"B", "p", "run", "p", "p"},
		"revert before the replacement runs": {"B", "p", "A", "p", "p"},
		"revert after the replacement runs":  {"B", "p", "run", "p", "A", "p", "run", "p", "p"},
		"third shape during a replacement":   {"B", "p", "C", "p", "run", "p", "p"},
		"third shape after the cutover":      {"B", "p", "run", "p", "C", "p", "run", "p", "p"},
		"change while provisioning":          {"B", "p", "p"},
	}
	rows := 0
	for name, steps := range scenarios {
		variants := map[string][]string{"as is": steps}
		for i, s := range steps {
			if s != "p" {
				continue
			}
			crashed := slices.Clone(steps)
			crashed[i] = "x"
			variants[fmt.Sprintf("crash at step %d", i)] = crashed
			for _, f := range []string{"fail-create", "fail-get", "fail-delete"} {
				v := slices.Insert(slices.Clone(steps), i, f)
				variants[fmt.Sprintf("%s before step %d", f, i)] = v
			}
		}
		for vname, script := range variants {
			rows++
			t.Run(name+"/"+vname, func(t *testing.T) {
				w := newWorld(t)
				w.do("A", "p", "run", "p")
				if !w.ready() {
					t.Fatalf("set-up: not Ready: %+v", w.px.Status)
				}
				w.do(script...)
				w.settle()
			})
		}
	}
	t.Logf("%d orderings walked", rows)
}

// world is one Proxy, as persisted on the API server, and the fake backend
// it lives on; passes run the real reconcileNormal.
type world struct {
	t   *testing.T
	fp  *fake.Provider
	rec *recordingProvider
	r   *ProxyReconciler
	px  *egressv1.Proxy
}

// recordingProvider records the IDs Delete is called with.
type recordingProvider struct {
	provider.Provider
	mu      sync.Mutex
	deletes []string
}

func (p *recordingProvider) Delete(ctx context.Context, id string) error {
	p.mu.Lock()
	p.deletes = append(p.deletes, id)
	p.mu.Unlock()
	return p.Provider.Delete(ctx, id)
}

func (p *recordingProvider) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.deletes
	p.deletes = nil
	return out
}

var shapePorts = map[string]int32{"A": 3128, "B": 3129, "C": 3130}

func newWorld(t *testing.T) *world {
	fp := fake.New("pool", fake.NewBackend(), providerOptions())
	// Instances provision until the script says "run"; deletes take a Get.
	fp.SetProvisioningGets(1 << 20)
	fp.SetDeleteReturnsEarly(1)
	w := &world{t: t, fp: fp, rec: &recordingProvider{Provider: fp}}
	w.px = &egressv1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: types.UID("uid-" + strings.ReplaceAll(t.Name(), "/", "-")), Generation: 1},
		Spec:       egressv1.ProxySpec{Provider: "pool", AllowedSourceRanges: []string{"127.0.0.0/8"}},
	}
	w.restart()
	return w
}

// restart is a fresh reconciler: nothing in memory survives.
func (w *world) restart() {
	entry := &registry.Entry{Name: "pool", Type: "fake", Provider: w.rec, PollInterval: time.Millisecond}
	w.r = &ProxyReconciler{Client: env.Client, APIReader: env.Client, Providers: &staticProviders{entries: map[string]*registry.Entry{"pool": entry}}}
	w.r.init()
}

func (w *world) do(steps ...string) {
	w.t.Helper()
	for _, s := range steps {
		switch s {
		case "A", "B", "C":
			if w.px.Spec.Port != shapePorts[s] {
				w.px.Spec.Port = shapePorts[s]
				w.px.Generation++
			}
		case "p":
			w.pass(false)
		case "x":
			w.pass(true)
			w.restart()
		case "run":
			for _, r := range w.fp.Backend().Records() {
				if r.State == provider.StateProvisioning && !r.Deleting {
					w.fp.SetState(r.Name, provider.StateRunning)
				}
			}
		case "fail-create":
			w.fp.FailNext(provider.OpCreate, provider.Errorf(provider.ErrTransient, "injected"))
		case "fail-get":
			w.fp.FailNext(provider.OpGet, provider.Errorf(provider.ErrTransient, "injected"))
		case "fail-delete":
			w.fp.FailNext(provider.OpDelete, provider.Errorf(provider.ErrTransient, "injected"))
		default:
			w.t.Fatalf("unknown step %q", s)
		}
	}
}

// pass runs one reconcile pass; lost drops its status write, as a crash
// between the provider calls and the patch would.
func (w *world) pass(lost bool) {
	w.t.Helper()
	before := w.px.DeepCopy()
	px := w.px.DeepCopy()
	w.r.reconcileNormal(context.Background(), px)
	w.checkServingKept(before, px)
	if !lost {
		w.px = px
	}
	w.checkUnrecorded()
	if !lost {
		w.checkReadyTruth()
	}
}

// checkServingKept: a Delete of the instance at the endpoint is allowed only
// once its successor runs.
func (w *world) checkServingKept(before, after *egressv1.Proxy) {
	w.t.Helper()
	serving := recordOf(&before.Status).servingID()
	for _, id := range w.rec.take() {
		if id != serving {
			continue
		}
		cur := after.Status.ProviderID
		r, ok := w.fp.Backend().Lookup(strings.TrimPrefix(cur, "fake/"))
		if cur == "" || cur == serving || !ok || r.State != provider.StateRunning || r.Deleting {
			w.t.Fatalf("the serving instance %s was deleted while its successor %q does not run (%v)\nbefore: %+v\nafter:  %+v",
				serving, cur, r, before.Status, after.Status)
		}
	}
}

// checkUnrecorded: at most one live instance of the Proxy is unrecorded.
func (w *world) checkUnrecorded() {
	w.t.Helper()
	recorded := w.px.Status.RecordedProviderIDs()
	var unrecorded []string
	for _, r := range w.fp.Backend().Records() {
		if r.Marks != nil && r.Marks.UID == string(w.px.UID) && !r.Deleting && !slices.Contains(recorded, fake.ID(r.Name)) {
			unrecorded = append(unrecorded, r.Name)
		}
	}
	if len(unrecorded) > 1 {
		w.t.Fatalf("%d unrecorded instances %v; status %+v", len(unrecorded), unrecorded, w.px.Status)
	}
}

// checkReadyTruth: Ready is True exactly when a running instance of the
// Proxy serves at status.endpoint.
func (w *world) checkReadyTruth() {
	w.t.Helper()
	st := w.px.Status
	if !w.ready() {
		if st.Endpoint != "" && !w.replacing() {
			w.t.Fatalf("Ready is not True but the endpoint %s is set: %+v", st.Endpoint, st)
		}
		return
	}
	host, _, err := net.SplitHostPort(st.Endpoint)
	if err != nil {
		w.t.Fatalf("Ready but endpoint %q: %v (%+v)", st.Endpoint, err, st)
	}
	for _, r := range w.fp.Backend().Records() {
		if r.IP == host && r.State == provider.StateRunning && !r.Deleting {
			if want := recordOf(&st).servingID(); fake.ID(r.Name) != want {
				w.t.Fatalf("the endpoint %s is served by %s, the status says %s: %+v", st.Endpoint, r.Name, want, st)
			}
			return
		}
	}
	w.t.Fatalf("Ready with endpoint %s, but no running instance serves there: %v; status %+v", st.Endpoint, w.fp.Backend().Records(), st)
}

func (w *world) ready() bool {
	return meta.IsStatusConditionTrue(w.px.Status.Conditions, egressv1.ConditionReady)
}

func (w *world) replacing() bool { return w.px.Status.RetiringProviderID != "" }

// settle lets the backend run whatever is provisioning and passes until the
// Proxy rests on exactly one running instance of its current shape.
func (w *world) settle() {
	w.t.Helper()
	for range 20 {
		w.do("run", "p")
		st := w.px.Status
		want := createRequest(w.px, "", "", inPlace{}, "").Name
		var live []string
		for _, r := range w.fp.Backend().Records() {
			if r.Marks != nil && r.Marks.UID == string(w.px.UID) {
				live = append(live, r.Name)
			}
		}
		if w.ready() && st.InstanceName == want && st.RetiringProviderID == "" && len(st.SupersededProviderIDs) == 0 &&
			len(live) == 1 && live[0] == want && st.Endpoint != "" && strings.HasSuffix(st.Endpoint, fmt.Sprint(":", w.px.Spec.Port)) {
			return
		}
	}
	w.t.Fatalf("did not settle on one instance of the last shape: status %+v, backend %v", w.px.Status, w.fp.Backend().Records())
}

// TestReplacementLostWhileRetiringServes: the replacement vanishes from the
// backend while the retiring instance still serves; the Proxy stays Ready
// (Replacing) on the retiring instance, and the replacement is made again.
func TestReplacementLostWhileRetiringServes(t *testing.T) {
	w := newWorld(t)
	w.do("A", "p", "run", "p", "B", "p")
	serving := w.px.Status
	if serving.RetiringProviderID == "" || !w.ready() {
		t.Fatalf("set-up: no replacement under way: %+v", serving)
	}
	if !w.fp.Remove(serving.InstanceName) {
		t.Fatalf("set-up: no replacement %s on the backend", serving.InstanceName)
	}
	w.do("p")
	st := w.px.Status
	if got := readyReason(w.px); got != "True/"+egressv1.ReasonReplacing || st.Endpoint != serving.Endpoint ||
		st.RetiringProviderID != serving.RetiringProviderID || st.Phase != egressv1.PhaseRunning {
		t.Fatalf("replacement lost: Ready %s, status %+v; want True/Replacing on %s at %s", got, st, serving.RetiringProviderID, serving.Endpoint)
	}
	w.settle()
}
