package kubernetes

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"unique"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The provider's cache: informers over this installation's own objects
// (its label selector, in the entry's namespace or every one), started on
// the first call and stopped by Close. The Pods are kept with what
// instanceOf and the echo read (slimPod); the Services, ConfigMaps,
// Secrets and NetworkPolicies as metadata only, so no Secret's data is
// held. Get, ListByTag, the owner listings, ListSecondary, Create's look
// for an adoptable Pod and the deletes read it; a fleet's steady state
// costs the API server one watch per kind, not reads per Proxy.
//
// The rule that keeps a cache read from misleading the reconciler: the
// cache answers for an object unless the provider's own create of it has
// not been seen by the cache yet (ownWrites), or the cache has not
// synced; then the read goes to the API server, as every read did before.
// The provider's own deletes the cache has not seen are applied to what
// it answers: a secondary object deleted is left out of the listings (no
// finalizer holds those kinds), and nothing is deleted twice.
// An object the cache shows may be gone already (a deletion it has not
// seen): that costs at most a request answered NotFound, or a Terminated
// state one event early. An object the cache lacks was either never there,
// deleted (the cache saw it go), or made by someone after the cache's view
// of it: only this provider makes objects with its marks, and its creates
// are in ownWrites from before the request until the cache sees them. So
// the deletion pass, which must not miss an instance made just before,
// reads live whenever it would otherwise trust an absence the cache cannot
// vouch for (TestStaleCacheNeverHidesAnOwnCreate). Objects made behind the
// cache's back (a killed predecessor's create still in flight) are the one
// thing the rule cannot see coming, so the deletion pass's listing of a
// Proxy's Pods is always live, and an instance it finds that the cache
// lacks is read live until the cache sees it
// (TestOwnerListingFindsWhatTheCacheMissed).
//
// The Pod informer is also the instance watch (provider.InstanceWatcher):
// a Pod of ours that changed or went is told, so the reconciler reads its
// Proxy at once. Without `list` and `watch` on a kind the informer never
// syncs and every read stays live; Check names the missing right.

// objectCache is the provider's cache state.
type objectCache struct {
	// changed is the instance watcher's callback.
	changed atomic.Pointer[func(id string)]

	once   sync.Once
	mu     sync.Mutex
	cancel context.CancelFunc // nil until started
	closed bool
	// pods and byKind are set once, under once, before any read.
	pods   cache.SharedIndexInformer
	byKind map[string]cache.SharedIndexInformer

	// handled are the handlers' registrations: synced once each has
	// seen its informer's first listing (owners is then complete).
	handled []cache.ResourceEventHandlerRegistration
	owners  ownerIndex

	own ownWrites

	// bypass is a test seam: while it says so, the cache cannot say
	// and every read goes live. Nil in production.
	bypass func() bool
}

// ownerIndex finds the cached secondaries of a Proxy by their UID mark.
// The informers' handlers keep it, each before it settles an own create
// (ownWrites), so an owner listing the rule lets the cache answer finds
// every create it settled. client-go's own indexer held a set per owner
// and kind: 17.6 MiB of the heap at 10,000 Proxies (docs/performance.md).
type ownerIndex struct {
	mu   sync.Mutex
	keys map[string][]objectKey
}

// moved records that the object k's UID mark went from old to now ("":
// none, so add and delete are moves from and to "").
func (x *ownerIndex) moved(k objectKey, old, now string) {
	if old == now {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old != "" {
		keys := slices.DeleteFunc(x.keys[old], func(o objectKey) bool { return o == k })
		if len(keys) == 0 {
			delete(x.keys, old)
		} else {
			x.keys[old] = keys
		}
	}
	if now != "" {
		if x.keys == nil {
			x.keys = map[string][]objectKey{}
		}
		if !slices.Contains(x.keys[now], k) {
			x.keys[now] = append(x.keys[now], k)
		}
	}
}

// of is the keys of kind whose mark is uid.
func (x *ownerIndex) of(kind, uid string) []objectKey {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []objectKey
	for _, k := range x.keys[uid] {
		if k.kind == kind {
			out = append(out, k)
		}
	}
	return out
}

// has says the index holds k under uid.
func (x *ownerIndex) has(k objectKey, uid string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Contains(x.keys[uid], k)
}

// keyAndOwner is obj's key as kind and its UID mark.
func keyAndOwner(kind string, obj any) (objectKey, string, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return objectKey{}, "", false
	}
	return objectKey{kind, m.GetNamespace(), m.GetName()}, m.GetLabels()[provider.MarkUID], true
}

// WatchInstances implements provider.InstanceWatcher.
func (p *Provider) WatchInstances(changed func(id string)) { p.cache.changed.Store(&changed) }

// startCache starts the informers on c and mc, once.
func (p *Provider) startCache(c clientset.Interface, mc metadata.Interface) {
	oc := &p.cache
	oc.once.Do(func() {
		oc.mu.Lock()
		defer oc.mu.Unlock()
		if oc.closed {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		oc.cancel = cancel
		sel := p.selector()
		tweak := func(o *metav1.ListOptions) { o.LabelSelector = sel }
		pods := c.CoreV1().Pods(p.cfg.Namespace) // "" is every namespace
		oc.pods = cache.NewSharedIndexInformerWithOptions(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				tweak(&o)
				return pods.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				tweak(&o)
				return pods.Watch(ctx, o)
			},
		}, &corev1.Pod{}, cache.SharedIndexInformerOptions{
			// No owner index: the Pods' owner listing is live (the rule).
			ObjectDescription: "the " + Type + " provider's pods",
		})
		_ = oc.pods.SetTransform(slimPod)
		reg, _ := oc.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { oc.own.seen("pod", obj) },
			UpdateFunc: func(_, obj any) { oc.own.seen("pod", obj); p.tellChanged(obj) },
			DeleteFunc: func(obj any) { oc.own.went("pod", obj); p.tellChanged(obj) },
		})
		oc.handled = []cache.ResourceEventHandlerRegistration{reg}
		oc.byKind = map[string]cache.SharedIndexInformer{}
		for _, k := range secondaryKinds {
			kind := k.kind
			inf := metadatainformer.NewFilteredMetadataInformer(mc, k.resource, p.cfg.Namespace, 0,
				cache.Indexers{}, tweak).Informer()
			_ = inf.SetTransform(compactMetadata)
			reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: func(obj any) {
					if k, uid, ok := keyAndOwner(kind, obj); ok {
						oc.owners.moved(k, "", uid)
					}
					oc.own.seen(kind, obj)
				},
				UpdateFunc: func(old, obj any) {
					_, was, _ := keyAndOwner(kind, old)
					if k, uid, ok := keyAndOwner(kind, obj); ok {
						oc.owners.moved(k, was, uid)
					}
					oc.own.seen(kind, obj)
				},
				DeleteFunc: func(obj any) {
					if k, uid, ok := keyAndOwner(kind, obj); ok {
						oc.owners.moved(k, uid, "")
					}
					oc.own.went(kind, obj)
				},
			})
			oc.byKind[kind] = inf
			oc.handled = append(oc.handled, reg)
		}
		go oc.pods.RunWithContext(ctx)
		for _, inf := range oc.byKind {
			go inf.RunWithContext(ctx)
		}
	})
}

// stopCache ends the informers; Close calls it.
func (p *Provider) stopCache() {
	oc := &p.cache
	oc.mu.Lock()
	defer oc.mu.Unlock()
	oc.closed = true
	if oc.cancel != nil {
		oc.cancel()
	}
}

// tellChanged tells the instance watcher of a Pod of ours that changed or
// went. Added Pods are not told: the provider's own Create (its caller
// knows), or the informer's first listing.
func (p *Provider) tellChanged(obj any) {
	f := p.cache.changed.Load()
	if f == nil {
		return
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pod, ok := obj.(*cachedPod); ok && p.ours(pod.GetLabels()) {
		(*f)(instanceID(pod.Namespace, pod.Name))
	}
}

// synced says the informers are running and have listed once.
func (oc *objectCache) synced() bool {
	if oc.pods == nil || (oc.bypass != nil && oc.bypass()) {
		return false
	}
	oc.mu.Lock()
	closed := oc.closed
	oc.mu.Unlock()
	if closed || !oc.pods.HasSynced() {
		return false
	}
	for _, inf := range oc.byKind {
		if !inf.HasSynced() {
			return false
		}
	}
	for _, reg := range oc.handled {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

func (oc *objectCache) informer(kind string) cache.SharedIndexInformer {
	if kind == "pod" {
		return oc.pods
	}
	return oc.byKind[kind]
}

// lookup finds the object of kind at namespace/name in the cache. known is
// false when the cache cannot say (a kind it does not hold, not synced, or
// an own create of the object it has not seen): the caller reads live.
func (oc *objectCache) lookup(kind, namespace, name string) (obj metav1.Object, found, known bool) {
	inf := oc.informer(kind)
	if inf == nil || !oc.synced() || oc.own.unseen(objectKey{kind, namespace, name}) {
		return nil, false, false
	}
	m, found, err := stored(inf, namespace, name)
	if err != nil {
		return nil, false, false
	}
	return m, found, true
}

// stored is the object the informer's store holds at namespace/name.
func stored(inf cache.SharedIndexInformer, namespace, name string) (metav1.Object, bool, error) {
	item, exists, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, false, err
	}
	m, err := meta.Accessor(item)
	if err != nil {
		return nil, false, err
	}
	return m, true, nil
}

// pod is lookup for the Pod; found only with a *corev1.Pod.
func (oc *objectCache) pod(namespace, name string) (pod *corev1.Pod, found, known bool) {
	obj, found, known := oc.lookup("pod", namespace, name)
	if !found {
		return nil, false, known
	}
	cp, ok := obj.(*cachedPod)
	if !ok {
		return nil, false, false
	}
	return cp.pod(), true, true
}

// owned lists the cached objects of kind whose UID mark is uid; known is
// false when the cache cannot vouch for the listing (see lookup).
func (oc *objectCache) owned(kind, uid string) ([]metav1.Object, bool) {
	inf := oc.informer(kind)
	if inf == nil || !oc.synced() || oc.own.owes(kind, uid) {
		return nil, false
	}
	var out []metav1.Object
	for _, k := range oc.owners.of(kind, uid) {
		m, found, err := stored(inf, k.namespace, k.name)
		if err != nil {
			return nil, false
		}
		// The index follows the store by a handler's call: what the
		// store holds now decides.
		if found && m.GetLabels()[provider.MarkUID] == uid {
			out = append(out, m)
		}
	}
	return out, true
}

// all lists every cached object of kind; known as for owned, with no own
// create of the kind unseen.
func (oc *objectCache) all(kind string) ([]metav1.Object, bool) {
	inf := oc.informer(kind)
	if inf == nil || !oc.synced() || oc.own.owes(kind, "") {
		return nil, false
	}
	return accessors(inf.GetIndexer().List())
}

func accessors(items []any) ([]metav1.Object, bool) {
	out := make([]metav1.Object, 0, len(items))
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			return nil, false
		}
		out = append(out, m)
	}
	return out, true
}

// slimPod keeps of a Pod what the provider reads (cachedPod).
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	// Of the metadata, what the reads need (the reads that need more,
	// adoption and a Secret remade for its Pod, are live); the strings
	// many Pods repeat held once.
	out := &cachedPod{ObjectMeta: metav1.ObjectMeta{Name: intern(pod.Name), Namespace: intern(pod.Namespace),
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, CreationTimestamp: pod.CreationTimestamp,
		DeletionTimestamp: pod.DeletionTimestamp},
		labels: sharedLabels.of(pod.Labels), nodeName: pod.Spec.NodeName,
		phase: pod.Status.Phase, podIP: pod.Status.PodIP, podIPs: pod.Status.PodIPs}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.ready = &corev1.PodCondition{Type: c.Type, Status: c.Status}
		}
	}
	if len(pod.Spec.Containers) > 0 {
		c := pod.Spec.Containers[0]
		out.container, out.ports = intern(c.Name), c.Ports
	}
	return out, nil
}

// cachedPod is what the cache holds of a Pod: its compacted metadata and
// what instanceOf, the echo and the deletes read (the node, the phase,
// the IPs, the Ready condition, the first container's name and ports). A
// corev1.Pod, mostly empty fields, held 2 KiB more per Pod: 21.5 MiB at
// 10,000 Proxies.
type cachedPod struct {
	metav1.ObjectMeta // no labels: those are in labels
	labels            *labelSet
	nodeName          string
	phase             corev1.PodPhase
	podIP             string
	podIPs            []corev1.PodIP
	ready             *corev1.PodCondition
	container         string
	ports             []corev1.ContainerPort
}

// GetObjectKind and DeepCopyObject make it a runtime.Object for the
// informer's machinery; the cache itself never copies it.
func (c *cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetLabels is the shared label set: read it, never change it.
func (c *cachedPod) GetLabels() map[string]string { return c.labels.get() }

func (c *cachedPod) SetLabels(l map[string]string) { c.labels = sharedLabels.of(l) }

func (c *cachedPod) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.podIPs = slices.Clone(c.podIPs)
	out.ports = slices.Clone(c.ports)
	if c.ready != nil {
		r := *c.ready
		out.ready = &r
	}
	return &out
}

// pod is the Pod the cache holds, as the provider reads Pods: a new
// value each call, so a caller may change it.
func (c *cachedPod) pod() *corev1.Pod {
	out := &corev1.Pod{Spec: corev1.PodSpec{NodeName: c.nodeName},
		Status: corev1.PodStatus{Phase: c.phase, PodIP: c.podIP, PodIPs: slices.Clone(c.podIPs)}}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Labels = maps.Clone(c.labels.get())
	if c.ready != nil {
		out.Status.Conditions = []corev1.PodCondition{*c.ready}
	}
	if c.container != "" || len(c.ports) > 0 {
		out.Spec.Containers = []corev1.Container{{Name: c.container, Ports: slices.Clone(c.ports)}}
	}
	return out
}

// intern is s's canonical copy: strings held by many cached objects are
// held once. The unique package forgets a string no handle needs any
// more, so the pool does not grow with churn.
func intern(s string) string { return unique.Make(s).Value() }

// objectKey names one object of the provider's.
type objectKey struct{ kind, namespace, name string }

// ownWrites are the provider's writes the cache has not seen yet.
type ownWrites struct {
	mu sync.Mutex
	// creates are objects this provider is making or made, from before
	// the request until the cache sees them (or the API server refused
	// the request for certain).
	creates map[objectKey]pendingCreate
	// deleting are objects this provider deleted that the cache still
	// shows, so a pass that comes before their end does not delete again.
	deleting map[types.UID]bool
	// behindCache are objects a live read found that the cache lacks
	// (made behind its back), until the cache sees them or they go.
	behindCache map[objectKey]bool
}

// pendingCreate is an own create the cache has not seen. The cache may
// still show, or tell the end of, an older object under the same name (a
// Secret deleted by hand and made again): only what this create made
// settles it, known by its UID once the API server answered.
type pendingCreate struct {
	// owner is the UID mark of the Proxy it is for.
	owner string
	// uid is the made object's; "" while the request is out.
	uid types.UID
	// uncertain: no certain answer (a timeout, a 5xx, AlreadyExists):
	// whatever the cache shows next under the name is what is there.
	uncertain bool
}

// settledBy says an event of the cache for the object uid settles c.
func (c pendingCreate) settledBy(uid types.UID) bool {
	return c.uncertain || (c.uid != "" && c.uid == uid)
}

// creating records a create of k for owner, before its request.
func (w *ownWrites) creating(k objectKey, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.creates == nil {
		w.creates = map[objectKey]pendingCreate{}
	}
	w.creates[k] = pendingCreate{owner: owner}
}

// answered records the API server's answer to the create of k: the UID
// it made, or no UID for an answer that leaves it uncertain.
func (w *ownWrites) answered(k objectKey, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.creates[k]; ok {
		c.uid, c.uncertain = uid, uid == ""
		w.creates[k] = c
	}
}

// settle forgets k: the cache saw it, or the create was refused.
func (w *ownWrites) settle(k objectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.creates, k)
	delete(w.behindCache, k)
}

// absent is a live read's NotFound for k: an object found behind the
// cache is gone, and so is a create that was answered; one whose request
// is still out may yet be made.
func (w *ownWrites) absent(k objectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.behindCache, k)
	if c, ok := w.creates[k]; ok && (c.uid != "" || c.uncertain) {
		delete(w.creates, k)
	}
}

// behind records k, found live and missing from the cache.
func (w *ownWrites) behind(k objectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.behindCache == nil {
		w.behindCache = map[objectKey]bool{}
	}
	w.behindCache[k] = true
}

// unseen says the cache cannot vouch for k: an own create of it, or an
// object a live read found, that it has not seen.
func (w *ownWrites) unseen(k objectKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.creates[k]
	return ok || w.behindCache[k]
}

// owes says a create of kind for owner ("" for any) is unseen.
func (w *ownWrites) owes(kind, owner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.creates {
		if k.kind == kind && (owner == "" || c.owner == owner) {
			return true
		}
	}
	return false
}

func (w *ownWrites) deleted(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deleting == nil {
		w.deleting = map[types.UID]bool{}
	}
	w.deleting[uid] = true
}

func (w *ownWrites) isDeleting(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deleting[uid]
}

// seen is the cache's add or update of obj.
func (w *ownWrites) seen(kind string, obj any) {
	if m, err := meta.Accessor(obj); err == nil {
		w.saw(objectKey{kind, m.GetNamespace(), m.GetName()}, m.GetUID())
	}
}

// went is the cache's deletion of obj.
func (w *ownWrites) went(kind string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	w.saw(objectKey{kind, m.GetNamespace(), m.GetName()}, m.GetUID())
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.deleting, m.GetUID())
}

// saw is an event of the cache for k, the object uid: the cache now
// vouches for k unless an own create of another object under the name is
// pending.
func (w *ownWrites) saw(k objectKey, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.behindCache, k)
	if c, ok := w.creates[k]; ok && c.settledBy(uid) {
		delete(w.creates, k)
	}
}

// createOwn makes an own object through do, recorded in ownWrites from
// before the request until the cache has seen what it made.
func createOwn[T metav1.Object](oc *objectCache, k objectKey, owner string, do func() (T, error)) (T, error) {
	oc.own.creating(k, owner)
	obj, err := do()
	switch {
	case err == nil:
		oc.own.answered(k, obj.GetUID())
		// The cache may have seen it before the answer came: its event
		// found no UID to match.
		if oc.holds(k, obj.GetUID()) {
			oc.own.settle(k)
		}
	case refusedForCertain(err):
		oc.own.settle(k)
	default:
		oc.own.answered(k, "")
		if apierrors.IsAlreadyExists(err) && oc.holds(k, "") {
			// The name's object is in the cache already: it vouches.
			oc.own.settle(k)
		}
	}
	return obj, err
}

// holds says the cache has seen k (with uid, unless ""): its store has
// it and, for a kind with an owner index, the index too. The store is
// written before the handlers run, and an owner listing the cache answers
// once the create is settled must find the object.
func (oc *objectCache) holds(k objectKey, uid types.UID) bool {
	inf := oc.informer(k.kind)
	if inf == nil {
		return false
	}
	m, found, err := stored(inf, k.namespace, k.name)
	if err != nil || !found || (uid != "" && m.GetUID() != uid) {
		return false
	}
	_, indexed := oc.byKind[k.kind]
	owner := m.GetLabels()[provider.MarkUID]
	return !indexed || owner == "" || oc.owners.has(k, owner)
}

// refusedForCertain says the API server answered err and made nothing: a
// 4xx other than AlreadyExists (which says the object is there). No
// answer, a timeout or a 5xx may have made it.
func refusedForCertain(err error) bool {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) || apierrors.IsAlreadyExists(err) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}
