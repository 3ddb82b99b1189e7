package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// census is what the run left once the operator converged (or the wait for
// it ended).
type census struct {
	converged time.Duration
	// stuck names each Proxy that did not reach rest: a cycle Proxy still
	// in the API server, or a resident not Ready, still replacing, or
	// being deleted.
	stuck []string
	// leaked lists, by kind, the marked objects of this installation whose
	// UID names no existing Proxy.
	leaked map[string][]leak
	// injectedLeaked counts the leaked objects that carry the UID of an
	// instance --inject-leak made.
	injectedLeaked int
	// duplicates names each existing Proxy with more than one instance.
	duplicates []string
	proxies    int
	// kinds are the backend's kinds, in the report's order.
	kinds []string
}

func (c *census) leakedTotal() int {
	n := 0
	for _, l := range c.leaked {
		n += len(l)
	}
	return n
}

func (c *census) verdict() error {
	var errs []error
	if len(c.stuck) > 0 {
		errs = append(errs, fmt.Errorf("%d Proxies stuck: %s", len(c.stuck), strings.Join(c.stuck, "; ")))
	}
	for _, k := range c.kinds {
		if l := c.leaked[k]; len(l) > 0 {
			descs := make([]string, len(l))
			for i, o := range l {
				descs[i] = o.desc
			}
			errs = append(errs, fmt.Errorf("%d %s leaked: %s", len(l), k, strings.Join(descs, ", ")))
		}
	}
	if len(c.duplicates) > 0 {
		errs = append(errs, fmt.Errorf("%d Proxies with two instances at rest: %s", len(c.duplicates), strings.Join(c.duplicates, "; ")))
	}
	return errors.Join(errs...)
}

// converge waits, up to --converge-timeout, for every Proxy to be at rest,
// then counts what is on the backend. A Proxy still not at rest then is
// reported stuck, not returned as an error: the count is still worth
// having.
func (s *soak) converge(ctx context.Context) (*census, error) {
	started := time.Now()
	var stuck []string
	lastBeat := started
	err := poll(ctx, s.opts.convergeTimeout, func() (bool, error) {
		var err error
		stuck, err = s.unrested(ctx)
		if err != nil {
			return false, err
		}
		if len(stuck) > 0 && time.Since(lastBeat) >= progressEvery {
			lastBeat = time.Now()
			s.out.say("converging: %d Proxies not at rest yet (%.0fs): %s", len(stuck), time.Since(started).Seconds(), strings.Join(stuck, "; "))
		}
		return len(stuck) == 0, nil
	})
	if err != nil && !errors.Is(err, errTimedOut) {
		if ctx.Err() != nil {
			return nil, errInterrupted
		}
		return nil, err
	}
	c, err := s.count(ctx)
	if err != nil {
		return nil, err
	}
	c.stuck, c.converged = stuck, time.Since(started)
	return c, nil
}

// unrested describes each Proxy not at rest.
func (s *soak) unrested(ctx context.Context) ([]string, error) {
	var list egressv1.ProxyList
	if err := s.cp.client().List(ctx, &list, client.InNamespace(proxyNamespace)); err != nil {
		return nil, err
	}
	var out []string
	for i := range list.Items {
		px := &list.Items[i]
		resident := strings.HasPrefix(px.Name, "resident-")
		switch {
		case !resident, px.DeletionTimestamp != nil, !proxyReady(px), px.Status.RetiringProviderID != "", len(px.Status.SupersededProviderIDs) > 0:
			out = append(out, describe(px))
		}
	}
	return out, nil
}

func describe(px *egressv1.Proxy) string {
	ready := "no Ready condition"
	if c := apimeta.FindStatusCondition(px.Status.Conditions, "Ready"); c != nil {
		ready = fmt.Sprintf("Ready=%s/%s gen %d of %d: %s", c.Status, c.Reason, c.ObservedGeneration, px.Generation, c.Message)
	}
	deleting := ""
	if px.DeletionTimestamp != nil {
		deleting = fmt.Sprintf(", deleting since %s, finalizers %v", px.DeletionTimestamp.Format(time.TimeOnly), px.Finalizers)
	}
	return fmt.Sprintf("%s (phase %s, %s, providerID %q, retiring %q, superseded %v%s)",
		px.Name, px.Status.Phase, ready, px.Status.ProviderID, px.Status.RetiringProviderID, px.Status.SupersededProviderIDs, deleting)
}

// count lists what this installation left on the backend against the
// Proxies that exist.
func (s *soak) count(ctx context.Context) (*census, error) {
	var proxies egressv1.ProxyList
	if err := s.cp.client().List(ctx, &proxies); err != nil {
		return nil, err
	}
	exists := map[string]string{}
	for _, px := range proxies.Items {
		exists[string(px.UID)] = px.Name
	}
	leaked, duplicates, err := s.backend.count(ctx, exists)
	if err != nil {
		return nil, err
	}
	c := &census{leaked: leaked, duplicates: duplicates, proxies: len(proxies.Items), kinds: s.backend.kinds()}
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	for _, l := range leaked {
		for _, o := range l {
			if s.stats.injectedUIDs[o.uid] {
				c.injectedLeaked++
			}
		}
	}
	return c, nil
}

// report prints the run's figures, one `key: value` a line.
func (s *soak) report(c *census) {
	kills, starts, own := s.mgr.counts()
	st := &s.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	lines := [][2]any{
		{"provider", s.opts.provider},
		{"seed", s.opts.seed},
		{"cycles", st.cycles},
		{"kills", kills},
		{"manager starts", starts},
		{"manager exits on its own", own},
		{"proxies created", st.created},
		{"proxies deleted", st.deleted},
		{"spec changes", st.specChanges + st.residentSpecChanges},
		{"cycle waits timed out", st.cycleTimeouts},
		{"injected leaks", fmt.Sprintf("%d (%s)", st.injected, orNone(s.opts.inject))},
		{"converged in", c.converged.Round(100 * time.Millisecond)},
		{"proxies at rest", c.proxies},
		{"stuck", len(c.stuck)},
	}
	for _, k := range c.kinds {
		lines = append(lines, [2]any{"leaked " + k, len(c.leaked[k])})
	}
	lines = append(lines,
		[2]any{"leaked", c.leakedTotal()},
		[2]any{"leaked with an injected UID", c.injectedLeaked},
		[2]any{"leaked with another UID", c.leakedTotal() - c.injectedLeaked},
		[2]any{"duplicates", len(c.duplicates)},
		[2]any{"wall time", time.Since(s.start).Round(time.Second)},
	)
	var b strings.Builder
	b.WriteString("--- soak figures\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "%s: %v\n", l[0], l[1])
	}
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	fmt.Print(b.String())
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
