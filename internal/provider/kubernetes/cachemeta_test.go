package kubernetes

import (
	"hash/maphash"
	"maps"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestCompactMetadata (issue 25): what the cache holds of a metadata-only
// object reads back as the fields the provider reads (name, namespace,
// UID, creation time, deletion mark, labels) and nothing else; an object
// handed to the transform again is kept; objects with the same labels
// share one set, others do not.
func TestCompactMetadata(t *testing.T) {
	created := metav1.NewTime(time.Unix(1_700_000_000, 0))
	deleting := metav1.NewTime(time.Unix(1_700_000_100, 0))
	labels := map[string]string{provider.MarkUID: "uid-a", labelInstance: "proxy-a"}
	full := func(name string, l map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("obj-" + name), ResourceVersion: "7", Generation: 3,
			CreationTimestamp: created, DeletionTimestamp: &deleting,
			Labels:          maps.Clone(l),
			Annotations:     map[string]string{annotationProxy: "team/a"},
			OwnerReferences: []metav1.OwnerReference{{Name: "a", UID: "uid-a"}},
			Finalizers:      []string{"f"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
		}}
	}
	held, err := compactMetadata(full("proxy-a", labels))
	if err != nil {
		t.Fatal(err)
	}
	cm, ok := held.(*cachedMeta)
	if !ok {
		t.Fatalf("compactMetadata kept a %T", held)
	}
	m, err := meta.Accessor(held)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetName() != "proxy-a" || m.GetNamespace() != "ns" || m.GetUID() != "obj-proxy-a" ||
		!m.GetCreationTimestamp().Time.Equal(created.Time) || !m.GetDeletionTimestamp().Equal(&deleting) ||
		!maps.Equal(m.GetLabels(), labels) {
		t.Errorf("reads back as %s/%s uid %s created %v deleting %v labels %v", m.GetNamespace(), m.GetName(),
			m.GetUID(), m.GetCreationTimestamp(), m.GetDeletionTimestamp(), m.GetLabels())
	}
	if m.GetAnnotations() != nil || m.GetOwnerReferences() != nil || m.GetFinalizers() != nil ||
		m.GetManagedFields() != nil || m.GetResourceVersion() != "" || m.GetGeneration() != 0 {
		t.Errorf("kept what no read needs: %+v", cm)
	}
	if again, _ := compactMetadata(held); again != held {
		t.Error("an object handed in again was made anew")
	}
	if c, ok := cm.DeepCopyObject().(*cachedMeta); !ok || *c.deleting != *cm.deleting || c.deleting == cm.deleting ||
		c.name != cm.name || c.labels != cm.labels {
		t.Errorf("DeepCopyObject: %+v", c)
	}

	// An instance's other objects carry the same labels: one set.
	sibling, _ := compactMetadata(full("proxy-a", labels))
	other, _ := compactMetadata(full("proxy-b", map[string]string{provider.MarkUID: "uid-b", labelInstance: "proxy-b"}))
	if sibling.(*cachedMeta).labels != cm.labels {
		t.Error("two objects with the same labels hold two sets")
	}
	if other.(*cachedMeta).labels == cm.labels || !maps.Equal(other.(*cachedMeta).GetLabels(),
		map[string]string{provider.MarkUID: "uid-b", labelInstance: "proxy-b"}) {
		t.Errorf("another instance's labels read %v", other.(*cachedMeta).GetLabels())
	}
	// Unlabelled, never created: empty, not the epoch.
	bare, _ := compactMetadata(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	if b := bare.(*cachedMeta); b.GetLabels() != nil || !b.GetCreationTimestamp().Time.IsZero() || b.GetDeletionTimestamp() != nil {
		t.Errorf("a bare object reads %+v", b)
	}
}

// Label sets two different label maps hash alike to are both right, the
// second unshared; a set no object holds is forgotten, so the table does
// not grow with churn.
func TestLabelSets(t *testing.T) {
	sets := newLabelSets(func(map[string]string) uint64 { return 1 }) // every set collides
	a := sets.of(map[string]string{"k": "a"})
	b := sets.of(map[string]string{"k": "b"})
	if !maps.Equal(a.get(), map[string]string{"k": "a"}) || !maps.Equal(b.get(), map[string]string{"k": "b"}) {
		t.Fatalf("colliding sets read %v and %v", a.get(), b.get())
	}
	if again := sets.of(map[string]string{"k": "a"}); again != a {
		t.Error("the first of two colliding sets is not shared")
	}
	if sets.of(nil) != nil || sets.of(map[string]string{}) != nil {
		t.Error("no labels made a set")
	}
	runtime.KeepAlive(b)

	churn := newLabelSets(labelsHash(maphash.MakeSeed()))
	for i := range 100 {
		churn.of(map[string]string{"instance": string(rune('a' + i%26)), "n": string(rune('0' + i/26))})
	}
	if n := churn.size(); n != 100 {
		t.Fatalf("%d sets held, want 100", n)
	}
	testenv.Eventually(t, "the sets no object holds are forgotten", func() bool {
		runtime.GC()
		return churn.size() == 0
	})
}
