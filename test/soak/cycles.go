package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

const (
	// progressEvery is how often the run prints where it is.
	progressEvery = 10 * time.Second
	// pollPeriod is how often a cycle looks at its Proxy while it waits.
	pollPeriod = 200 * time.Millisecond
	// basePort is a new Proxy's spec.port; a spec change moves it to one of
	// the next two, which reshapes the instance (a replacement).
	basePort = 3128
)

var errTimedOut = errors.New("timed out")

// The plans of a cycle, picked at random.
const (
	planReadyThenDelete  = iota // wait for Ready, delete
	planDeleteEarly             // delete after a random pause, often mid-create
	planChangeThenDelete        // (Ready or a pause), change the spec, (Ready or a pause), delete
	nPlans
)

// drive runs the residents and the cycles until every cycle ended, printing
// progress; it returns early on an interrupt or when the supervisor gave up.
func (s *soak) drive(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for i := range s.opts.residents {
		px := s.newProxy(fmt.Sprintf("resident-%d", i))
		if err := s.cp.client().Create(ctx, px); err != nil {
			return fmt.Errorf("creating %s: %w", px.Name, err)
		}
		s.stats.add(func(st *stats) { st.created++ })
	}
	var wg sync.WaitGroup
	residentsCtx, stopResidents := context.WithCancel(ctx)
	defer stopResidents()
	if s.opts.residents > 0 {
		wg.Go(func() { s.changeResidents(residentsCtx) })
	}
	var next atomic.Int64
	var workers sync.WaitGroup
	for w := range s.opts.concurrency {
		workers.Go(func() {
			rng := s.rng(uint64(w) + 1)
			for ctx.Err() == nil {
				n := int(next.Add(1))
				if n > s.opts.cycles {
					return
				}
				if err := s.cycle(ctx, n, rng); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-workersDone:
			done = true
		case <-tick.C:
			s.progress(ctx)
			if err := s.mgr.err(); err != nil {
				cancel(err)
			}
		}
	}
	stopResidents()
	wg.Wait()
	s.progress(context.Background())
	if err := context.Cause(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			return errInterrupted
		}
		return err
	}
	return nil
}

func (s *soak) progress(ctx context.Context) {
	var list egressv1.ProxyList
	live := "?"
	if err := s.cp.client().List(ctx, &list, client.InNamespace(proxyNamespace)); err == nil {
		live = fmt.Sprint(len(list.Items))
	}
	kills, starts, own := s.mgr.counts()
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	s.out.say("progress: cycles %d/%d, created %d, deleted %d, spec changes %d, Proxies in the API %s, kills %d, manager starts %d, exits on its own %d, cycle waits timed out %d",
		s.stats.cycles, s.opts.cycles, s.stats.created, s.stats.deleted, s.stats.specChanges+s.stats.residentSpecChanges, live, kills, starts, own, s.stats.cycleTimeouts)
}

func (s *soak) newProxy(name string) *egressv1.Proxy {
	return &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: name}, Spec: s.backend.proxySpec()}
}

// cycle is one Proxy's life: created, maybe its spec changed, deleted, and
// awaited until the API server no longer has it. A wait past
// --cycle-timeout is counted and left to the final check, which names the
// Proxies still there; only an API error the soak cannot go on after ends
// the run.
func (s *soak) cycle(ctx context.Context, n int, rng *rand.Rand) error {
	px := s.newProxy(fmt.Sprintf("cycle-%04d", n))
	if err := s.cp.client().Create(ctx, px); err != nil {
		return fmt.Errorf("creating %s: %w", px.Name, err)
	}
	s.stats.add(func(st *stats) { st.created++ })
	key := client.ObjectKeyFromObject(px)
	readyOrPause := func(max time.Duration) error {
		if rng.IntN(2) == 0 {
			return s.waitCycle(ctx, key, "Ready", proxyReady)
		}
		return pause(ctx, time.Duration(rng.Int64N(int64(max))))
	}
	var err error
	switch s.pickPlan(rng) {
	case planReadyThenDelete:
		err = s.waitCycle(ctx, key, "Ready", proxyReady)
	case planDeleteEarly:
		err = pause(ctx, time.Duration(rng.Int64N(int64(s.opts.earlyMax))))
	case planChangeThenDelete:
		if err = readyOrPause(s.opts.earlyMax); err == nil {
			if err = s.setPort(ctx, key, basePort+1+int32(rng.IntN(2))); err == nil {
				s.stats.add(func(st *stats) { st.specChanges++ })
				err = readyOrPause(s.opts.earlyMax * 2 / 3)
			}
		}
	}
	if err != nil {
		return err
	}
	var last *egressv1.Proxy // as read before the deletion, for --inject-leak
	if s.opts.inject != "" && n%s.opts.injectEvery == 0 {
		last = &egressv1.Proxy{}
		if err := s.cp.client().Get(ctx, key, last); err != nil {
			return fmt.Errorf("reading %s: %w", key.Name, err)
		}
		if s.opts.inject != injectLate {
			if err := s.injectLeak(ctx, last); err != nil {
				return err
			}
		}
	}
	if err := s.cp.client().Delete(ctx, px); err != nil {
		return fmt.Errorf("deleting %s: %w", px.Name, err)
	}
	s.stats.add(func(st *stats) { st.deleted++ })
	if err := s.waitCycle(ctx, key, "gone", func(*egressv1.Proxy) bool { return false }); err != nil {
		return err
	}
	if last != nil && s.opts.inject == injectLate {
		// Only once the Proxy is gone (the wait may have timed out).
		switch err := s.cp.client().Get(ctx, key, &egressv1.Proxy{}); {
		case apierrors.IsNotFound(err):
			if err := s.injectLeak(ctx, last); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("reading %s: %w", key.Name, err)
		default:
			s.out.say("%s: still there after its deletion; no late instance injected", key.Name)
		}
	}
	s.stats.add(func(st *stats) { st.cycles++ })
	return nil
}

// pickPlan picks a cycle's plan, by --provider's weights.
func (s *soak) pickPlan(rng *rand.Rand) int {
	w := providerDefaults[s.opts.provider].planWeights
	if w == nil {
		return rng.IntN(nPlans)
	}
	total := 0
	for _, n := range w {
		total += n
	}
	r := rng.IntN(total)
	for plan, n := range w {
		if r < n {
			return plan
		}
		r -= n
	}
	return nPlans - 1 // not reached: r < total
}

// waitCycle polls the Proxy until cond holds, or until it is gone when
// what is "gone". A timeout is counted, not returned.
func (s *soak) waitCycle(ctx context.Context, key types.NamespacedName, what string, cond func(*egressv1.Proxy) bool) error {
	err := poll(ctx, s.opts.cycleTimeout, func() (bool, error) {
		px := &egressv1.Proxy{}
		err := s.cp.client().Get(ctx, key, px)
		switch {
		case apierrors.IsNotFound(err):
			return what == "gone", nil
		case err != nil:
			return false, fmt.Errorf("reading %s: %w", key.Name, err)
		}
		return cond(px), nil
	})
	if errors.Is(err, errTimedOut) {
		s.stats.add(func(st *stats) { st.cycleTimeouts++ })
		s.out.say("%s: not %s within %s; going on (the final check names it if it stays so)", key.Name, what, s.opts.cycleTimeout)
		return nil
	}
	return err
}

// proxyReady: Ready is True for the Proxy's current generation.
func proxyReady(px *egressv1.Proxy) bool {
	c := apimeta.FindStatusCondition(px.Status.Conditions, "Ready")
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == px.Generation
}

// setPort sets the Proxy's port; a negative port moves it that many steps
// (one or two) through the three ports the soak uses.
func (s *soak) setPort(ctx context.Context, key types.NamespacedName, port int32) error {
	px := &egressv1.Proxy{}
	if err := s.cp.client().Get(ctx, key, px); err != nil {
		return fmt.Errorf("reading %s: %w", key.Name, err)
	}
	before := px.DeepCopy()
	if port < 0 {
		// -1 or -2: one or two ports up the three the soak uses, so the
		// port always changes whatever it is now.
		port = basePort + (px.Spec.Port-basePort-port)%3
	}
	px.Spec.Port = port
	if err := s.cp.client().Patch(ctx, px, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("changing %s's port: %w", key.Name, err)
	}
	return nil
}

// changeResidents changes one resident's port every --resident-min to
// --resident-max, so the residents go through replacements while the
// operator is being killed.
func (s *soak) changeResidents(ctx context.Context) {
	rng := s.rng(1 << 32)
	for {
		if pause(ctx, s.opts.residentMin+time.Duration(rng.Int64N(int64(s.opts.residentMax-s.opts.residentMin)+1))) != nil {
			return
		}
		key := types.NamespacedName{Namespace: proxyNamespace, Name: fmt.Sprintf("resident-%d", rng.IntN(s.opts.residents))}
		if err := s.setPort(ctx, key, -1-int32(rng.IntN(2))); err != nil {
			if ctx.Err() == nil {
				s.out.say("resident: %v", err)
			}
			continue
		}
		s.stats.add(func(st *stats) { st.residentSpecChanges++ })
	}
}

// pause waits d, or less if ctx ends first. The pauses are the workload's
// random timing, not waits for an event.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// poll calls check every pollPeriod until it returns true or an error,
// ctx ends, or timeout passes (errTimedOut).
func poll(ctx context.Context, timeout time.Duration, check func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := check()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errTimedOut
		}
		if err := pause(ctx, pollPeriod); err != nil {
			return err
		}
	}
}
