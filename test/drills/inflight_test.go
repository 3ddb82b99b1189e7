package drills

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// afterCreate is the fake provider with one more step to stop at: after
// Create has made the instance and returned, before the reconciler gets
// the result (and so before it writes the status). A gate armed for a
// Proxy holds that Proxy's next successful Create there until released,
// or until the call's ctx ends (an operator stopped mid-pass).
type afterCreate struct {
	*fake.Provider

	mu    sync.Mutex
	gates map[string]*createGate // by Proxy name
}

type createGate struct {
	reached, release chan struct{}
	once             sync.Once
}

func (a *afterCreate) arm(proxy string) *createGate {
	g := &createGate{reached: make(chan struct{}), release: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gates == nil {
		a.gates = map[string]*createGate{}
	}
	a.gates[proxy] = g
	return g
}

func (g *createGate) open() { g.once.Do(func() { close(g.release) }) }

func (a *afterCreate) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	inst, err := a.Provider.Create(ctx, req)
	if err != nil {
		return inst, err
	}
	a.mu.Lock()
	g := a.gates[req.ProxyName]
	delete(a.gates, req.ProxyName)
	a.mu.Unlock()
	if g != nil {
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	}
	return inst, nil
}

// inflightFleet is a fleet whose providers stop where the steps ask.
type inflightFleet struct {
	*fleet
	mu      sync.Mutex
	wrapped *afterCreate
}

func newInflightFleet(t *testing.T, name string) *inflightFleet {
	f := &inflightFleet{fleet: newFleet(t, name)}
	// The collector is off: what is left must be the reconciler's to
	// delete, not the collector's to clean up after it.
	f.opts.GCInterval, f.opts.GCGrace = time.Hour, 2*time.Hour
	f.wrap = func(p *fake.Provider) provider.Provider {
		a := &afterCreate{Provider: p}
		f.mu.Lock()
		f.wrapped = a
		f.mu.Unlock()
		return a
	}
	return f
}

func (f *inflightFleet) hook() *afterCreate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wrapped
}

func (f *inflightFleet) get(t *testing.T, name string) *egressv1.Proxy {
	t.Helper()
	px := f.proxy(name)
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(px), px); err != nil {
		t.Fatal(err)
	}
	return px
}

func (f *inflightFleet) deleteProxy(t *testing.T, name string) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), f.proxy(name)); err != nil {
		t.Fatal(err)
	}
}

// waitStatus waits until the Proxy's status satisfies cond.
func (f *inflightFleet) waitStatus(t *testing.T, name, what string, cond func(*egressv1.Proxy) bool) {
	t.Helper()
	testenv.EventuallyNil(t, what, func() error {
		px := f.proxy(name)
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(px), px); err != nil {
			return err
		}
		if !cond(px) {
			return fmt.Errorf("status %+v", px.Status)
		}
		return nil
	})
}

// serving creates the Proxy and waits until it is Ready.
func (f *inflightFleet) serving(t *testing.T, name string) *egressv1.Proxy {
	t.Helper()
	if err := env.Client.Create(context.Background(), f.proxy(name)); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(t, name, "Proxy Ready", isReady)
	return f.get(t, name)
}

// reshape changes the Proxy's port, so the reconciler makes a new
// instance and retires the serving one once it runs (make before break).
func (f *inflightFleet) reshape(t *testing.T, name string) {
	t.Helper()
	px := f.get(t, name)
	px.Spec.Port = 3129
	if err := env.Client.Update(context.Background(), px); err != nil {
		t.Fatal(err)
	}
}

func wait(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	testenv.Eventually(t, what, func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	})
}

// inflightStep is one step of the create path at which the Proxy is
// deleted. run brings its Proxy "px" to the step, deletes it, and lets the
// step go on.
type inflightStep struct {
	name string
	run  func(t *testing.T, f *inflightFleet, op *running) *running
}

// The create path, step by step (internal/controller/proxy_controller.go,
// reconcileNormal; docs/provider-contract.md §5 for the slow create):
// the provider's Create running, Create returned with the status not yet
// written (the operator going on, or killed there), a slow create step in
// the background, the step failed with its unfinished instance left, the
// provisioning Gets; and the same for a replacement's new instance while
// the old one serves. The conformance suite (providertest, async.go) checks
// each provider's Delete against its own create steps, and the controller
// tests drive single passes (TestDeletionFindsInstanceItsStatusNeverRecorded,
// TestSlowCreateHoldsNoWorker); this sweeps every step through the
// assembled operator.
var inflightSteps = []inflightStep{
	{"in Create, before it returns", func(t *testing.T, f *inflightFleet, op *running) *running {
		p := f.provider()
		release := p.Block(provider.OpCreate)
		defer release()
		mustCreate(t, f.fleet, "px")
		testenv.Eventually(t, "Create called", func() bool { return p.Calls(provider.OpCreate) >= 1 })
		f.deleteProxy(t, "px")
		release()
		return op
	}},
	{"Create returned, status not written", func(t *testing.T, f *inflightFleet, op *running) *running {
		g := f.hook().arm("px")
		defer g.open()
		mustCreate(t, f.fleet, "px")
		wait(t, "Create returned", g.reached)
		f.deleteProxy(t, "px")
		g.open()
		return op
	}},
	{"Create returned, operator killed before the status write", func(t *testing.T, f *inflightFleet, op *running) *running {
		g := f.hook().arm("px")
		defer g.open()
		mustCreate(t, f.fleet, "px")
		wait(t, "Create returned", g.reached)
		if err := op.stop(); err != nil {
			t.Fatal(err)
		}
		if px := f.get(t, "px"); px.Status.ProviderID != "" {
			t.Fatalf("the status recorded %s: the step was not reached", px.Status.ProviderID)
		}
		f.deleteProxy(t, "px")
		return f.start() // a fresh process over the same backend
	}},
	{"slow create step in the background", func(t *testing.T, f *inflightFleet, op *running) *running {
		h := f.provider().HoldCreateWhere(func(r provider.CreateRequest) bool { return r.ProxyName == "px" })
		defer h.Release(nil)
		mustCreate(t, f.fleet, "px")
		wait(t, "create step started", h.Started())
		f.waitStatus(t, "px", "Provisioning recorded", func(px *egressv1.Proxy) bool { return px.Status.ProviderID != "" })
		f.deleteProxy(t, "px")
		return op
	}},
	{"slow create step failed, unfinished instance left", func(t *testing.T, f *inflightFleet, op *running) *running {
		p := f.provider()
		h := p.HoldCreateWhere(func(r provider.CreateRequest) bool { return r.ProxyName == "px" })
		mustCreate(t, f.fleet, "px")
		wait(t, "create step started", h.Started())
		// The resumed Create must not finish it before the delete.
		p.SetError(provider.OpCreate, errors.New("fake: backend busy"))
		h.Release(errors.New("fake: clone task failed"))
		wait(t, "create step ended", h.Done())
		if len(f.instances()) != 1 {
			t.Fatalf("backend %v: want the unfinished instance", names(f.instances()))
		}
		f.deleteProxy(t, "px")
		p.SetError(provider.OpCreate, nil)
		return op
	}},
	{"provisioning Gets", func(t *testing.T, f *inflightFleet, op *running) *running {
		f.provider().SetProvisioningGets(1 << 20)
		mustCreate(t, f.fleet, "px")
		f.waitStatus(t, "px", "Provisioning recorded", func(px *egressv1.Proxy) bool {
			return px.Status.ProviderID != "" && px.Status.Phase == egressv1.PhaseProvisioning
		})
		f.deleteProxy(t, "px")
		return op
	}},
	{"replacement: in the new instance's Create", func(t *testing.T, f *inflightFleet, op *running) *running {
		p := f.provider()
		f.serving(t, "px")
		creates := p.Calls(provider.OpCreate)
		release := p.Block(provider.OpCreate)
		defer release()
		f.reshape(t, "px")
		testenv.Eventually(t, "the replacement's Create called", func() bool { return p.Calls(provider.OpCreate) > creates })
		f.deleteProxy(t, "px")
		release()
		return op
	}},
	{"replacement: new instance's Create returned, status not written", func(t *testing.T, f *inflightFleet, op *running) *running {
		f.serving(t, "px")
		g := f.hook().arm("px")
		defer g.open()
		f.reshape(t, "px")
		wait(t, "the replacement's Create returned", g.reached)
		if len(f.instances()) != 2 {
			t.Fatalf("backend %v: want the serving and the new instance", names(f.instances()))
		}
		f.deleteProxy(t, "px")
		g.open()
		return op
	}},
	{"replacement: new instance provisioning, the old one retiring", func(t *testing.T, f *inflightFleet, op *running) *running {
		f.serving(t, "px")
		f.provider().SetProvisioningGets(1 << 20)
		f.reshape(t, "px")
		f.waitStatus(t, "px", "replacement recorded", func(px *egressv1.Proxy) bool { return px.Status.RetiringProviderID != "" })
		f.deleteProxy(t, "px")
		return op
	}},
}

func mustCreate(t *testing.T, f *fleet, name string) {
	t.Helper()
	if err := env.Client.Create(context.Background(), f.proxy(name)); err != nil {
		t.Fatal(err)
	}
}

// TestDrillDeleteDuringCreate deletes a Proxy at every step of its create
// path (inflightSteps) and asserts the Proxy is released and nothing of it
// is left on the backend.
//
//	go test ./test/drills -run DeleteDuringCreate -v
func TestDrillDeleteDuringCreate(t *testing.T) {
	for i, step := range inflightSteps {
		t.Run(step.name, func(t *testing.T) {
			f := newInflightFleet(t, fmt.Sprintf("drill-inflight-%d", i))
			op := f.start()
			op = step.run(t, f, op)
			testenv.EventuallyNil(t, "the Proxy released and nothing left on the backend", f.allGone)
			if exited, err := op.exited(); exited {
				t.Errorf("the operator exited: %v", err)
			}
			figure(t, fmt.Sprintf("inflight.step_%d", i+1), step.name+": released, 0 instances left")
		})
	}
}
