package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// ownerListing is a provider.OwnerLister over a fake provider's fleet
// listings, filtered by UID, recording the UIDs it was asked for (each of
// its calls is one of the fake's listings).
type ownerListing struct {
	fp                      *fake.Provider
	mu                      sync.Mutex
	instanceUIDs, secondUID []string
}

func (o *ownerListing) ListOwnedInstances(ctx context.Context, uid string) ([]provider.Instance, error) {
	o.asked(&o.instanceUIDs, uid)
	all, err := o.fp.ListByTag(ctx)
	return slices.DeleteFunc(all, func(in provider.Instance) bool { return in.UID != uid }), err
}

// ListOwnedSecondaries may leave InstanceGone unset; the fake's listing
// says what it knows, which the pass must not need.
func (o *ownerListing) ListOwnedSecondaries(ctx context.Context, uid string) ([]provider.Secondary, error) {
	o.asked(&o.secondUID, uid)
	all, err := o.fp.ListSecondary(ctx)
	return slices.DeleteFunc(all, func(s provider.Secondary) bool { return s.Marks.UID != uid }), err
}

func (o *ownerListing) asked(uids *[]string, uid string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	*uids = append(*uids, uid)
}

// A deletion pass on an entry that lists by owner (provider.OwnerLister)
// asks it for its own Proxy's objects and never lists the fleet: no
// ListByTag, no ListSecondary; and what the owner listing finds beyond the
// status (an unrecorded instance of the Proxy, as a killed operator
// leaves) is still deleted, so nothing is left.
func TestDeletionPassListsByOwner(t *testing.T) {
	entry, fp := fakeEntry("pool")
	entry.Secondary = fp
	owner := &ownerListing{fp: fp}
	entry.Owned = owner
	d := newDirect(t, &staticProviders{entries: map[string]*registry.Entry{"pool": entry}})
	d.create(newProxy("web", "pool"))
	px := d.reconcileUntil("web", 3, "Ready", hasReason("True/Running"))
	// An instance of the Proxy its status does not record, and another
	// Proxy's, which the pass must leave alone.
	req := provider.CreateRequest{Namespace: d.ns, ProxyName: "web", UID: string(px.UID), Port: 3128}
	req.Name = provider.InstanceName(d.ns, "web", req.UID, "unrecorded")
	unrecorded, err := fp.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	other := req
	other.ProxyName, other.UID = "other", "uid-other"
	other.Name = provider.InstanceName(d.ns, "other", other.UID, "s")
	if _, err := fp.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	// A leftover of a Create that never made its instance: only a
	// secondary listing finds it.
	marks := provider.Marks{Managed: true, UID: req.UID, Installation: testInstallation}
	leftover := fp.Backend().PlantSecondary("volume", provider.InstanceName(d.ns, "web", req.UID, "crashed"), &marks)
	fp.Reset()
	if err := env.Client.Delete(context.Background(), d.get("web")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5 && d.get("web") != nil; i++ {
		d.reconcile("web")
	}
	if d.get("web") != nil {
		t.Fatal("the Proxy was not released")
	}
	owner.mu.Lock()
	defer owner.mu.Unlock()
	if n, m := fp.Calls(provider.OpList)-len(owner.instanceUIDs), fp.Calls(provider.OpListSecondary)-len(owner.secondUID); n != 0 || m != 0 {
		t.Errorf("the deletion listed the fleet: %d ListByTag, %d ListSecondary beside the owner listings; want none", n, m)
	}
	if len(owner.instanceUIDs) == 0 || len(owner.secondUID) == 0 {
		t.Errorf("owner listings: instances for %v, secondaries for %v; want the Proxy's UID in both", owner.instanceUIDs, owner.secondUID)
	}
	for _, uid := range append(owner.instanceUIDs, owner.secondUID...) {
		if uid != string(px.UID) {
			t.Errorf("an owner listing asked for UID %q, want the Proxy's %q", uid, px.UID)
		}
	}
	if _, err := fp.Get(context.Background(), unrecorded.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("the unrecorded instance %s is still there after the deletion (Get: %v)", unrecorded.ID, err)
	}
	if _, ok := fp.Backend().LookupSecondary(leftover.Kind, leftover.Instance); ok {
		t.Errorf("the Proxy's leftover %s is still there after the deletion", leftover.ID)
	}
	left := 0
	for _, rec := range fp.Backend().Records() {
		if rec.Marks != nil && rec.Marks.UID == "uid-other" {
			left++
		}
	}
	if left != 1 {
		t.Errorf("the other Proxy's instance: %d left, want 1 (untouched)", left)
	}
}

// A listing that blocks until the test releases it, numbering its starts.
type heldListing struct {
	starts  atomic.Int32
	release chan struct{}
}

func (h *heldListing) list(ctx context.Context) ([]int, error) {
	n := h.starts.Add(1)
	select {
	case <-h.release:
		return []int{int(n)}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A call never gets a listing that started before it asked: the calls made
// while a round runs share the next round, which starts when the running
// one ends. Three calls, two listings.
func TestListRoundsNeverServeAnOlderListing(t *testing.T) {
	var rounds listRounds[int]
	h := &heldListing{release: make(chan struct{})}
	ctx := context.Background()
	type result struct {
		items []int
		err   error
	}
	call := func() chan result {
		c := make(chan result, 1)
		go func() {
			items, err := rounds.list(ctx, time.Minute, h.list)
			c <- result{items, err}
		}()
		return c
	}
	first := call()
	testenv.Eventually(t, "the first listing running", func() bool { return h.starts.Load() == 1 })
	second, third := call(), call()
	// Both have joined the next round before the first listing ends (not
	// just the first of them: a call joining after the release is served
	// by a third round, rightly).
	testenv.Eventually(t, "both calls waiting for the next round", func() bool {
		rounds.mu.Lock()
		defer rounds.mu.Unlock()
		return rounds.next != nil && rounds.next.joined == 2
	})
	close(h.release)
	for name, c := range map[string]chan result{"first": first, "second": second, "third": third} {
		want := 2
		if name == "first" {
			want = 1
		}
		r := <-c
		if r.err != nil || len(r.items) != 1 || r.items[0] != want {
			t.Errorf("%s call got %v, %v; want listing #%d", name, r.items, r.err, want)
		}
	}
	if n := h.starts.Load(); n != 2 {
		t.Errorf("%d listings for 3 calls (2 while one ran), want 2", n)
	}
	testenv.Eventually(t, "the rounds idle", rounds.idle)
}

// A caller that gives up stops its own wait only: the round goes on for the
// others, and its error is its own.
func TestListRoundsCallerCancelLeavesTheRound(t *testing.T) {
	var rounds listRounds[int]
	h := &heldListing{release: make(chan struct{})}
	cancelled, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := rounds.list(cancelled, time.Minute, h.list)
		gaveUp <- err
	}()
	testenv.Eventually(t, "the listing running", func() bool { return h.starts.Load() == 1 })
	other := make(chan []int, 1)
	go func() {
		items, _ := rounds.list(context.Background(), time.Minute, h.list)
		other <- items
	}()
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) || !errors.Is(err, provider.ErrTransient) {
		t.Errorf("the cancelled caller got %v, want a Transient context.Canceled", err)
	}
	close(h.release)
	if items := <-other; len(items) != 1 || items[0] != 2 {
		t.Errorf("the other caller got %v, want listing #2", items)
	}
}

// Many concurrent deletions share few listings, and each still sees what
// existed when it asked.
func TestListRoundsShareUnderLoad(t *testing.T) {
	var rounds listRounds[int]
	var mu sync.Mutex
	existing := 0
	var starts atomic.Int32
	fn := func(ctx context.Context) ([]int, error) {
		starts.Add(1)
		time.Sleep(2 * time.Millisecond) // a listing takes a while
		mu.Lock()
		defer mu.Unlock()
		return []int{existing}, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			existing++ // what exists when this call asks
			seenAtCall := existing
			mu.Unlock()
			items, err := rounds.list(context.Background(), time.Minute, fn)
			if err != nil || items[0] < seenAtCall {
				errs <- fmt.Errorf("call %d: listing %v (%v) older than the call, which saw %d", i, items, err, seenAtCall)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("200 calls, %d listings", starts.Load())
	if n := starts.Load(); n >= 200 {
		t.Errorf("%d listings for 200 concurrent calls: nothing shared", n)
	}
}
