package kubernetes

import (
	"hash/maphash"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// cachedMeta is what the cache holds of a Service, ConfigMap,
// NetworkPolicy or Secret: the fields the provider reads of them (the
// name, the UID its deletes are conditioned on, the creation time the
// collector's grace counts from, the deletion mark, the labels). A
// metav1.PartialObjectMetadata is 264 bytes of mostly empty fields and a
// label map of its own; at 10,000 Proxies the cache holds 40,000 of them.
//
// It is a metav1.Object so the informer's machinery and the provider's
// reads take it as any object; the fields it does not keep read empty and
// their setters do nothing.
type cachedMeta struct {
	name, namespace string
	uid             types.UID
	created         int64 // Unix seconds: the API server's precision
	deleting        *metav1.Time
	labels          *labelSet
}

// compactMetadata is the metadata-only kinds' transform. An object the
// informer hands it again (a relist's tombstone) is kept as it is.
func compactMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &cachedMeta{name: intern(m.Name), namespace: intern(m.Namespace), uid: m.UID,
		created: m.CreationTimestamp.Unix(), labels: sharedLabels.of(m.Labels)}
	if m.DeletionTimestamp != nil {
		out.deleting = m.DeletionTimestamp.DeepCopy()
	}
	return out, nil
}

func (c *cachedMeta) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies all but the label set, which nothing changes.
func (c *cachedMeta) DeepCopyObject() k8sruntime.Object {
	out := *c
	out.deleting = c.deleting.DeepCopy()
	return &out
}

func (c *cachedMeta) GetName() string      { return c.name }
func (c *cachedMeta) GetNamespace() string { return c.namespace }
func (c *cachedMeta) GetUID() types.UID    { return c.uid }
func (c *cachedMeta) GetCreationTimestamp() metav1.Time {
	if c.created == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(c.created, 0))
}
func (c *cachedMeta) GetDeletionTimestamp() *metav1.Time { return c.deleting }

// GetLabels is the shared label set: read it, never change it.
func (c *cachedMeta) GetLabels() map[string]string { return c.labels.get() }

func (c *cachedMeta) SetName(n string)                      { c.name = n }
func (c *cachedMeta) SetNamespace(n string)                 { c.namespace = n }
func (c *cachedMeta) SetUID(u types.UID)                    { c.uid = u }
func (c *cachedMeta) SetCreationTimestamp(t metav1.Time)    { c.created = t.Unix() }
func (c *cachedMeta) SetDeletionTimestamp(t *metav1.Time)   { c.deleting = t }
func (c *cachedMeta) SetLabels(l map[string]string)         { c.labels = sharedLabels.of(l) }
func (c *cachedMeta) GetGenerateName() string               { return "" }
func (c *cachedMeta) SetGenerateName(string)                {}
func (c *cachedMeta) GetResourceVersion() string            { return "" }
func (c *cachedMeta) SetResourceVersion(string)             {}
func (c *cachedMeta) GetGeneration() int64                  { return 0 }
func (c *cachedMeta) SetGeneration(int64)                   {}
func (c *cachedMeta) GetSelfLink() string                   { return "" }
func (c *cachedMeta) SetSelfLink(string)                    {}
func (c *cachedMeta) GetDeletionGracePeriodSeconds() *int64 { return nil }
func (c *cachedMeta) SetDeletionGracePeriodSeconds(*int64)  {}
func (c *cachedMeta) GetAnnotations() map[string]string     { return nil }
func (c *cachedMeta) SetAnnotations(map[string]string)      {}
func (c *cachedMeta) GetFinalizers() []string               { return nil }
func (c *cachedMeta) SetFinalizers([]string)                {}
func (c *cachedMeta) GetOwnerReferences() []metav1.OwnerReference {
	return nil
}
func (c *cachedMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (c *cachedMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (c *cachedMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

var _ metav1.Object = (*cachedMeta)(nil)

// labelSet is one set of labels, held once for every cached object that
// carries it: an instance's five objects carry the same six labels, and a
// Go map of six entries costs about 300 bytes.
type labelSet struct{ m map[string]string }

// get is the set's map; nil for no labels.
func (s *labelSet) get() map[string]string {
	if s == nil {
		return nil
	}
	return s.m
}

// labelSets hands out one labelSet per distinct set of labels. It holds
// them weakly, as the unique package does strings: a set no cached object
// holds any more is collected and its entry removed, so the table does not
// grow with churn.
type labelSets struct {
	mu   sync.Mutex
	hash func(map[string]string) uint64
	sets map[uint64]weak.Pointer[labelSet]
}

var sharedLabels = newLabelSets(labelsHash(maphash.MakeSeed()))

func newLabelSets(hash func(map[string]string) uint64) *labelSets {
	return &labelSets{hash: hash, sets: map[uint64]weak.Pointer[labelSet]{}}
}

// of is the shared set equal to l (copied, its strings interned, when it
// is new); nil for no labels. Two sets whose hashes collide are each kept
// whole, the second unshared.
func (t *labelSets) of(l map[string]string) *labelSet {
	if len(l) == 0 {
		return nil
	}
	h := t.hash(l)
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.sets[h]; ok {
		if s := w.Value(); s != nil {
			if maps.Equal(s.m, l) {
				return s
			}
			return newLabelSet(l)
		}
	}
	s := newLabelSet(l)
	t.sets[h] = weak.Make(s)
	runtime.AddCleanup(s, t.forget, h)
	return s
}

// forget drops the entry of a collected set, unless a new set took it.
func (t *labelSets) forget(h uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.sets[h]; ok && w.Value() == nil {
		delete(t.sets, h)
	}
}

// size is how many sets the table holds (tests).
func (t *labelSets) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sets)
}

// labelsHash hashes a set of labels in key order.
func labelsHash(seed maphash.Seed) func(map[string]string) uint64 {
	return func(l map[string]string) uint64 {
		var h maphash.Hash
		h.SetSeed(seed)
		for _, k := range slices.Sorted(maps.Keys(l)) {
			h.WriteString(k)
			h.WriteByte(0)
			h.WriteString(l[k])
			h.WriteByte(0)
		}
		return h.Sum64()
	}
}

func newLabelSet(l map[string]string) *labelSet {
	m := make(map[string]string, len(l))
	for k, v := range l {
		m[intern(k)] = intern(v)
	}
	return &labelSet{m: m}
}
