package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

const (
	// floorGroup is the stand-in CRD's group: the Proxy CRD's schema under
	// a group the operator does not watch.
	floorGroup = "floor.bench.proxy-operator.dev"
	// proxyCRDFile is the Proxy CRD in --crd-dir.
	proxyCRDFile = "egress.proxy-operator.dev_proxies.yaml"
	// warmUpObjects is how many lifecycles warmUp runs.
	warmUpObjects = 100
	// floorFinalizer stands for the operator's finalizer.
	floorFinalizer = "egress.proxy-operator.dev/instance"
)

var floorResource = schema.GroupVersionResource{Group: floorGroup, Version: "v1alpha1", Resource: "proxies"}

// floor is the API server's own floor: the fewest writes one Proxy's
// lifecycle needs, sent by a client with no rate limit.
type floor struct {
	b       *bench
	dyn     dynamic.NamespaceableResourceInterface
	scraper *scraper
}

// plainConfig is cfg with the client-side rate limit off.
func plainConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	return c
}

func newFloor(ctx context.Context, b *bench) (*floor, error) {
	raw, err := os.ReadFile(filepath.Join(b.opts.crdDir, proxyCRDFile))
	if err != nil {
		return nil, fmt.Errorf("the Proxy CRD for the stand-in: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", proxyCRDFile, err)
	}
	crd.ObjectMeta = metav1.ObjectMeta{Name: floorResource.Resource + "." + floorGroup}
	crd.Spec.Group = floorGroup
	if err := b.env.Client.Create(ctx, &crd); err != nil {
		return nil, fmt.Errorf("installing the stand-in CRD: %w", err)
	}
	cfg := plainConfig(b.env.Config)
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f := &floor{b: b, dyn: dc.Resource(floorResource)}
	if f.scraper, err = newScraper(b.env.Config); err != nil {
		return nil, err
	}
	// Established: the API server serves the group.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := f.dyn.Namespace(proxyNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the stand-in CRD %s is not served: %w", crd.Name, err)
	}
	return f, nil
}

func floorName(i int) string { return fmt.Sprintf("floor-%05d", i) }

// warmUp runs a few lifecycles unmeasured, so the first measured floor
// does not pay for the API server's first requests on the new group.
func (f *floor) warmUp(ctx context.Context) error {
	ns := f.dyn.Namespace(proxyNamespace)
	n := min(f.b.opts.n, warmUpObjects)
	name := func(i int) string { return fmt.Sprintf("warmup-%05d", i) }
	if err := forEach(ctx, n, f.b.opts.concurrency, func(ctx context.Context, i int) error { return f.create(ctx, ns, name(i)) }); err != nil {
		return err
	}
	return forEach(ctx, n, f.b.opts.concurrency, func(ctx context.Context, i int) error { return f.delete(ctx, ns, name(i)) })
}

// run does N create lifecycles at once, then N delete lifecycles, and
// prints their figures under <provider>.floor_.
func (f *floor) run(ctx context.Context, provider string) (phases, error) {
	b, n := f.b, f.b.opts.n
	key := func(k string) string { return provider + ".floor_" + k }
	ns := f.dyn.Namespace(proxyNamespace)
	b.progress("floor before %s: %d create lifecycles, %d at once", provider, n, b.opts.concurrency)

	before, err := f.scraper.scrape(ctx)
	if err != nil {
		return phases{}, err
	}
	var ready []time.Duration
	var mu sync.Mutex
	start := time.Now()
	err = b.forEachReporting(ctx, "floor create lifecycles done", n, func(ctx context.Context, i int) error {
		began := time.Now()
		if err := f.create(ctx, ns, floorName(i)); err != nil {
			return err
		}
		mu.Lock()
		ready = append(ready, time.Since(began))
		mu.Unlock()
		return nil
	})
	createTime := time.Since(start)
	if err != nil {
		return phases{}, err
	}
	after, err := f.scraper.scrape(ctx)
	if err != nil {
		return phases{}, err
	}
	created, _, _ := after.minus(before).split()
	b.out.seconds(key("create_seconds"), createTime)
	b.out.latencies(key("apply_to_ready"), ready)
	b.out.float(key("create_writes_per_object"), created.total()/float64(n))
	b.out.put(key("create_writes"), created.perObject(n))

	b.progress("floor before %s: %d delete lifecycles", provider, n)
	start = time.Now()
	err = b.forEachReporting(ctx, "floor delete lifecycles done", n, func(ctx context.Context, i int) error {
		return f.delete(ctx, ns, floorName(i))
	})
	if err != nil {
		return phases{}, err
	}
	left, err := ns.List(ctx, metav1.ListOptions{})
	if err != nil {
		return phases{}, err
	}
	deleteTime := time.Since(start)
	if len(left.Items) > 0 {
		return phases{}, fmt.Errorf("%d stand-in objects left after their finalizer went", len(left.Items))
	}
	gone, err := f.scraper.scrape(ctx)
	if err != nil {
		return phases{}, err
	}
	deleted, _, _ := gone.minus(after).split()
	b.out.seconds(key("delete_seconds"), deleteTime)
	b.out.float(key("delete_writes_per_object"), deleted.total()/float64(n))
	b.out.put(key("delete_writes"), deleted.perObject(n))
	return phases{create: createTime, delete: deleteTime, createWrites: created.total(), deleteWrites: deleted.total()}, nil
}

// create is one create lifecycle's writes: the object, the finalizer, the
// status with the instance's ID, the status Ready.
func (f *floor) create(ctx context.Context, ns dynamic.ResourceInterface, name string) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": floorResource.GroupVersion().String(),
		"kind":       "Proxy",
		"metadata":   map[string]any{"name": name, "namespace": proxyNamespace},
		"spec":       map[string]any{"provider": "floor"},
	}}
	if _, err := ns.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	patches := []struct {
		body, sub string
	}{
		{fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, floorFinalizer), ""},
		{fmt.Sprintf(`{"status":{"phase":"Provisioning","providerID":"floor://%s","instanceName":%q}}`, name, name), "status"},
		{fmt.Sprintf(`{"status":{"phase":"Running","endpoint":"192.0.2.1:3128","conditions":[{"type":"Ready","status":"True","reason":"Running","message":"","observedGeneration":1,"lastTransitionTime":%q}]}}`,
			time.Now().UTC().Format(time.RFC3339)), "status"},
	}
	for _, p := range patches {
		var subs []string
		if p.sub != "" {
			subs = []string{p.sub}
		}
		if _, err := ns.Patch(ctx, name, types.MergePatchType, []byte(p.body), metav1.PatchOptions{}, subs...); err != nil {
			return fmt.Errorf("patching %s %s: %w", name, p.sub, err)
		}
	}
	return nil
}

// delete is one delete lifecycle's writes: the delete, which the finalizer
// holds, and the finalizer's removal, which lets the object go.
func (f *floor) delete(ctx context.Context, ns dynamic.ResourceInterface, name string) error {
	if err := ns.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	if _, err := ns.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("removing the finalizer of %s: %w", name, err)
	}
	return nil
}

// forEachReporting is forEach at the bench's concurrency, saying every
// progressEvery how many calls of do have succeeded: at 10,000 a floor
// phase takes minutes.
func (b *bench) forEachReporting(ctx context.Context, what string, n int, do func(ctx context.Context, i int) error) error {
	var done atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				b.progress("%s: %d of %d", what, done.Load(), n)
			}
		}
	}()
	return forEach(ctx, n, b.opts.concurrency, func(ctx context.Context, i int) error {
		err := do(ctx, i)
		if err == nil {
			done.Add(1)
		}
		return err
	})
}

// forEach runs do for 0..n-1, at most concurrency at once, and returns the
// first error (the others stop at their next call).
func forEach(ctx context.Context, n, concurrency int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(concurrency, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
