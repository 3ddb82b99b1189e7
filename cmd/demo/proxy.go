package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

const (
	// deleteTimeout bounds the wait for a deleted Proxy to disappear, that
	// is for the operator to release its finalizer.
	deleteTimeout = 60 * time.Second
	// defaultNamespace is where a sample without a namespace goes.
	defaultNamespace = "default"
)

// proxyState is the demo's Proxy as far as the run got with it.
type proxyState struct {
	key         client.ObjectKey
	endpoint    string // status.endpoint once Ready
	deleteTried bool   // deleted once already: teardown does not wait again
}

func (d *demo) applySample(ctx context.Context) error {
	data, err := os.ReadFile(d.opts.sample)
	if err != nil {
		return err
	}
	// Strict, so a typo in the sample fails here rather than being dropped.
	obj, gvk, err := serializer.NewCodecFactory(testenv.Scheme, serializer.EnableStrict).UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding %s: %w", relPath(d.opts.sample), err)
	}
	p, ok := obj.(*v1alpha1.Proxy)
	if !ok {
		return fmt.Errorf("%s holds a %s; the demo needs one Proxy", relPath(d.opts.sample), gvk.Kind)
	}
	if p.Namespace == "" {
		p.Namespace = defaultNamespace
	}
	if err := d.cp.client().Create(ctx, p); err != nil {
		return fmt.Errorf("creating the Proxy from %s: %w", relPath(d.opts.sample), err)
	}
	d.proxy = &proxyState{key: client.ObjectKeyFromObject(p)}
	d.out.say("applied %s: Proxy %s (provider %q, port %d, allowedSourceRanges %v)",
		relPath(d.opts.sample), d.proxy.key, p.Spec.Provider, p.Spec.Port, p.Spec.AllowedSourceRanges)
	return nil
}

func (d *demo) waitReady(ctx context.Context) error {
	err := d.follow(ctx, "Ready", d.opts.readyTimeout, func(p *v1alpha1.Proxy) error {
		if p == nil {
			return fatal(errors.New("the Proxy disappeared"))
		}
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case c == nil:
			return errors.New("no Ready condition yet")
		// These two wait for something the demo will not do (change the
		// spec or the providers config): waiting longer shows nothing new.
		case c.Status != metav1.ConditionTrue && (c.Reason == v1alpha1.ReasonPermanentFailure || c.Reason == v1alpha1.ReasonProviderNotFound):
			return fatal(fmt.Errorf("the Proxy failed: Ready=%s %s: %s", c.Status, c.Reason, c.Message))
		case c.Status != metav1.ConditionTrue || p.Status.Endpoint == "":
			return fmt.Errorf("Ready=%s %s, endpoint %q", c.Status, c.Reason, p.Status.Endpoint)
		}
		d.proxy.endpoint = p.Status.Endpoint
		return nil
	})
	if err != nil {
		return err
	}
	d.out.say("Proxy %s is Ready at %s", d.proxy.key, d.proxy.endpoint)
	return nil
}

// deleteProxy deletes the Proxy and waits until it is gone, which proves
// that the operator released its finalizer; with --check it then checks
// that the instance stopped serving.
func (d *demo) deleteProxy(ctx context.Context) error {
	d.proxy.deleteTried = true
	c := d.cp.client()
	p := &v1alpha1.Proxy{}
	if err := c.Get(ctx, d.proxy.key, p); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case ctx.Err() != nil:
			return errInterrupted
		}
		return fmt.Errorf("reading the Proxy: %w", err)
	}
	finalizers := p.Finalizers
	d.out.say("deleting Proxy %s (finalizers %v)", d.proxy.key, finalizers)
	if err := c.Delete(ctx, p); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case ctx.Err() != nil:
			return errInterrupted
		}
		return fmt.Errorf("the API server refused the deletion: %w", err)
	}
	started := time.Now()
	err := d.follow(ctx, "gone", deleteTimeout, func(p *v1alpha1.Proxy) error {
		if p != nil {
			return errors.New("still there")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(finalizers) == 0 {
		d.out.say("Proxy %s is gone after %.1fs; it had no finalizer", d.proxy.key, time.Since(started).Seconds())
		if d.opts.check && d.fetched {
			// A Ready Proxy without one would leave its instance behind
			// when deleted: the deletion proved nothing.
			return fmt.Errorf("Proxy %s was Ready without a finalizer, so its deletion proves nothing", d.proxy.key)
		}
		return nil
	}
	d.out.say("Proxy %s is gone after %.1fs: the operator released its finalizer", d.proxy.key, time.Since(started).Seconds())
	if d.proxy.endpoint == "" || !d.opts.check {
		return nil
	}
	return d.checkEndpointClosed(ctx)
}

// teardownProxy deletes the Proxy while the operator still runs, so its
// finalizer is released as a user would see it. It waits only while the
// manager is alive and no second signal came.
func (d *demo) teardownProxy() error {
	select {
	case <-d.mgr.done:
		d.out.say("the manager is not running: not deleting Proxy %s (its finalizer would stay)", d.proxy.key)
		return nil
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-d.force:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := d.deleteProxy(ctx)
	if errors.Is(err, errInterrupted) {
		d.out.say("not waiting for Proxy %s to go", d.proxy.key)
		return nil
	}
	return err
}

// follow polls the Proxy until check returns nil (see poll), printing a
// line whenever its phase or Ready condition changes; what ("Ready",
// "gone") names the goal. check gets nil once the Proxy no longer exists.
func (d *demo) follow(ctx context.Context, what string, timeout time.Duration, check func(*v1alpha1.Proxy) error) error {
	var last *v1alpha1.Proxy
	lastState := ""
	err := d.poll(ctx, "Proxy "+d.proxy.key.String()+" to be "+what, timeout, func() error {
		var p *v1alpha1.Proxy
		got := &v1alpha1.Proxy{}
		switch err := d.cp.client().Get(ctx, d.proxy.key, got); {
		case err == nil:
			p, last = got, got
		case apierrors.IsNotFound(err):
		case ctx.Err() != nil:
			return err // poll sees ctx and says interrupted
		default:
			return fatal(fmt.Errorf("reading Proxy %s: %w", d.proxy.key, err))
		}
		state := "gone"
		if p != nil {
			state = summary(p)
		}
		if state != lastState {
			d.out.say("Proxy %s: %s", d.proxy.key, state)
			lastState = state
		}
		return check(p)
	})
	if errors.Is(err, errTimedOut) {
		d.out.say("Proxy %s still not %s after %s; last seen:\n%s", d.proxy.key, what, timeout, details(last))
	}
	return err
}

// summary is the part of a Proxy's state whose changes are worth a line.
func summary(p *v1alpha1.Proxy) string {
	s := "phase=" + orNone(string(p.Status.Phase))
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		s += fmt.Sprintf(" Ready=%s reason=%s", c.Status, c.Reason)
		if c.Message != "" {
			s += fmt.Sprintf(" (%s)", c.Message)
		}
	} else {
		s += " Ready=(none yet)"
	}
	if p.Status.Endpoint != "" {
		s += " endpoint=" + p.Status.Endpoint
	}
	if p.DeletionTimestamp != nil {
		s += fmt.Sprintf(" deleting, finalizers=%v", p.Finalizers)
	}
	return s
}

// details is what a timeout reports: every condition and the finalizers.
func details(p *v1alpha1.Proxy) string {
	if p == nil {
		return "never read"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  phase=%s providerID=%s endpoint=%s finalizers=%v conditions:",
		orNone(string(p.Status.Phase)), orNone(p.Status.ProviderID), orNone(p.Status.Endpoint), p.Finalizers)
	if len(p.Status.Conditions) == 0 {
		b.WriteString(" none (has the operator seen the Proxy at all?)")
	}
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "\n    %s=%s reason=%s since %s: %s", c.Type, c.Status, c.Reason, c.LastTransitionTime.Format(time.RFC3339), c.Message)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
