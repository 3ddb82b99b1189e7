package drills

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// churn creates a Proxy and deletes the oldest one it created, in turn,
// every tick, until stopped; it counts what the API server accepted and
// refused.
type churn struct {
	f                 *fleet
	created, deleted  atomic.Int64
	refused           atomic.Int64
	cancel            context.CancelFunc
	done              chan struct{}
	mu                sync.Mutex
	live              []string
	next              int
	refusedWhileDown  atomic.Int64
	apiDown           atomic.Bool
	acceptedWhileDown atomic.Int64
	keepLive          int
}

func startChurn(f *fleet, every time.Duration, keepLive int) *churn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &churn{f: f, cancel: cancel, done: make(chan struct{}), keepLive: keepLive}
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for create := true; ; create = !create {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			c.step(ctx, create)
		}
	}()
	return c
}

func (c *churn) step(ctx context.Context, create bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if create || len(c.live) <= c.keepLive {
		name := fmt.Sprintf("load-%04d", c.next)
		if err = env.Client.Create(ctx, c.f.proxy(name)); err == nil {
			c.next++
			c.live = append(c.live, name)
			c.created.Add(1)
		}
	} else {
		if err = client.IgnoreNotFound(env.Client.Delete(ctx, c.f.proxy(c.live[0]))); err == nil {
			c.live = c.live[1:]
			c.deleted.Add(1)
		}
	}
	switch {
	case err != nil:
		c.refused.Add(1)
		if c.apiDown.Load() {
			c.refusedWhileDown.Add(1)
		}
	case c.apiDown.Load():
		c.acceptedWhileDown.Add(1)
	}
}

func (c *churn) stop() {
	c.cancel()
	<-c.done
}

// TestDrillAPIServerDown: kube-apiserver is stopped for
// DRILL_APISERVER_DOWN (etcd keeps running) while Proxies are being
// created and deleted, under N serving ones. The operator runs with leader
// election, as deployed: it either keeps running or exits having lost its
// lease, and is then started again, as its Deployment would. After the API
// server is back, nothing is lost: every Proxy the API server holds is
// Ready, every deleted one is gone, and the backend holds exactly one
// instance per Proxy (no leak, no duplicate; the collector is off, so it
// cannot hide a leak of the reconciler's).
//
//	DRILLS=1 DRILL_PROXIES=200 DRILL_APISERVER_DOWN=60s go test ./test/drills -run APIServer -v
func TestDrillAPIServerDown(t *testing.T) {
	long(t)
	n := envInt(t, "DRILL_PROXIES", 50)
	down := envDuration(t, "DRILL_APISERVER_DOWN", 20*time.Second)

	f := newFleet(t, "drill-apiserver")
	f.opts.LeaderElect, f.opts.LeaderElectionNamespace = true, f.ns
	f.opts.GCInterval, f.opts.GCGrace = time.Hour, 2*time.Hour
	op := f.start()
	f.createProxies("px", n)
	waitWithin(t, 10*time.Minute, "every Proxy Ready", func() error { return f.allReady(n) })

	load := startChurn(f, 200*time.Millisecond, 5)
	testenv.Eventually(t, "the churn under way", func() bool { return load.deleted.Load() >= 20 })
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	load.apiDown.Store(true)
	stopped := time.Now()
	// The fault's duration: nothing to await but time.
	time.Sleep(down)
	load.apiDown.Store(false)
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	figure(t, "apiserver.stopped_for", down)
	figure(t, "apiserver.unanswered_for", back.Sub(stopped)) // the stop, the pause and the restart
	// The churn goes on after the restart, then stops so the fleet can
	// settle.
	churned := load.created.Load() + load.deleted.Load()
	testenv.Eventually(t, "the churn under way again", func() bool { return load.created.Load()+load.deleted.Load() >= churned+30 })
	load.stop()

	restarts := 0
	exited, err := op.exited()
	if exited {
		// Leader election lost: the Deployment would start it again.
		t.Logf("the operator exited during the outage (%v); starting it again", err)
		restarts++
		op.exitExpected = true
		op = f.start()
	}
	load.mu.Lock()
	live := n + len(load.live)
	load.mu.Unlock()
	waitWithin(t, 10*time.Minute, "every Proxy Ready, none left deleting, one instance each", func() error {
		if err := f.allReady(live); err != nil {
			return err
		}
		return f.accounted()
	})
	converged := time.Since(back)
	if exited, err := op.exited(); exited {
		t.Errorf("the operator exited after the API server came back: %v", err)
	}

	figure(t, "apiserver.proxies", n)
	figure(t, "apiserver.churn_created", load.created.Load())
	figure(t, "apiserver.churn_deleted", load.deleted.Load())
	figure(t, "apiserver.churn_refused_while_down", load.refusedWhileDown.Load())
	figure(t, "apiserver.churn_accepted_while_down", load.acceptedWhileDown.Load())
	figure(t, "apiserver.operator_restarts", restarts)
	figure(t, "apiserver.operator_exit", fmt.Sprint(err))
	figure(t, "apiserver.time_to_converge_after_restart", converged)
	figure(t, "apiserver.proxies_at_rest", live)
	figure(t, "apiserver.instances_at_rest", len(f.instances()))
	if load.refusedWhileDown.Load() == 0 || load.acceptedWhileDown.Load() > 0 {
		t.Errorf("%d API calls refused and %d accepted while the API server was stopped: the drill did not stop it",
			load.refusedWhileDown.Load(), load.acceptedWhileDown.Load())
	}
	f.deleteAll()
	waitWithin(t, 10*time.Minute, "every Proxy and instance gone", f.allGone)
}
