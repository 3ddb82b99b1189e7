package kubernetes

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Delete removes the instance's Pod and then its Service, ConfigMap, Secret and NetworkPolicy
// (every kind in secondaryKinds) and returns once the API server accepted
// the deletions; the Pod then terminates on its own (Get reads Terminated
// until it is gone). An object that is gone, or that is not ours, counts as
// deleted and is left alone.
func (p *Provider) Delete(ctx context.Context, id string) error {
	deleted, err := p.delete(ctx, id)
	provider.Note(ctx, "deleted", deleted)
	return err
}

func (p *Provider) delete(ctx context.Context, id string) ([]string, error) {
	c, err := p.begin(ctx, provider.OpDelete)
	if err != nil {
		return nil, err
	}
	ns, name, err := parseID(id)
	if err != nil {
		return nil, err
	}
	p.forgetEgress(id)
	// The Pod first: it stops serving, and a failure later leaves only
	// objects a retry, the owner reference or the garbage collector
	// (ListSecondary) removes. Then every secondary kind.
	kinds := append([]objectKind{podKind}, secondaryKinds...)
	// An instance the cache cannot vouch for (found live behind its back,
	// or made by this provider and not seen yet) is read live, all its
	// objects.
	_, _, known := p.cache.lookup("pod", ns, name)
	// Never touch what another installation or a human made.
	return p.deleteNamed(ctx, c, kinds, ns, name, p.ours, !known)
}

// deleteNamed deletes the object of each kind named namespace/name that
// mine admits by its labels, and returns the kinds it deleted. The objects
// are read from the cache when it can say (cache.go) and live is false: a
// deletion is then its DELETE alone. The UID precondition deletes exactly what was read: an
// object recreated under the name meanwhile is left for its owner; one
// gone already, going already, or not admitted, is skipped.
func (p *Provider) deleteNamed(ctx context.Context, c clientset.Interface, kinds []objectKind, namespace, name string,
	mine func(labels map[string]string) bool, live bool) ([]string, error) {
	var deleted []string
	for _, k := range kinds {
		what := k.kind + " " + instanceID(namespace, name)
		obj, err := p.readObject(ctx, c, k, namespace, name, live)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return deleted, classify(err, "reading "+what)
		}
		if !mine(obj.GetLabels()) {
			p.logger(ctx).V(2).Info("not ours, left alone", "object", what)
			continue
		}
		if going(obj, p.cache.own.isDeleting(obj.GetUID()), time.Now()) {
			continue
		}
		outcome, err := p.deleteObject(ctx, c, k, obj)
		if err != nil {
			return deleted, err
		}
		switch outcome {
		case outcomeDeleted:
			deleted = append(deleted, k.kind)
		case outcomeForced:
			deleted = append(deleted, k.kind+" (past its grace: grace 0)")
		}
	}
	return deleted, nil
}

// going says obj needs no DELETE now: one this provider deleted that the
// cache shows unchanged since, or a Pod within its grace period. A Pod
// past it is deleted again, with a grace of 0 (deleteObject): the
// kubelet's own last DELETE ends a Pod, and one whose kubelet is gone (a
// lost node), or a Pod with no node and no kubelet (envtest, the soak, the
// bench) that the API server left terminating (its grace of 0 raced an
// update), goes only so.
func going(obj metav1.Object, deletedByUs bool, now time.Time) bool {
	ts := obj.GetDeletionTimestamp()
	if ts == nil {
		return deletedByUs
	}
	return ts.After(now)
}
