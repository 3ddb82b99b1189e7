package kubernetes

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// failAfterPodDelete is a wire seam that answers the first Service
// DELETE with a 500, as an operator crash in a Delete between the Pod and
// its other objects would leave the backend: the Pod gone, the Service,
// ConfigMap and NetworkPolicy not. (A Create makes the Pod first, so no
// crash in it leaves objects without their Pod.)
func failAfterPodDelete(failed *atomic.Bool) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodDelete && strings.Contains(req.URL.Path, "/services/") && failed.CompareAndSwap(false, true) {
				return classResponse(req, provider.ErrTransient), nil
			}
			return next.RoundTrip(req)
		})
	}
}

// crashInDelete creates req's instance and deletes it through p with the
// deletion cut after the Pod (failAfterPodDelete), and waits for the Pod
// to go.
func crashInDelete(t *testing.T, cs clientset.Interface, p provider.Provider, failed *atomic.Bool, ns string, req provider.CreateRequest) {
	t.Helper()
	inst, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(t.Context(), inst.ID); !errors.Is(err, provider.ErrTransient) || !failed.Load() {
		t.Fatalf("Delete with the Service's DELETE refused: %v; want the injected Transient failure", err)
	}
	testenv.Eventually(t, "the crashed Delete's Pod gone", func() bool { return !exists(t, cs, "pod", ns, req.Name) })
}

// secondariesOf returns the listed secondaries of the instance named name.
func secondariesOf(list []provider.Secondary, name string) map[string]provider.Secondary {
	out := map[string]provider.Secondary{}
	for _, s := range list {
		if s.Instance == name {
			out[s.Kind] = s
		}
	}
	return out
}

func exists(t *testing.T, cs clientset.Interface, kind, ns, name string) bool {
	t.Helper()
	var err error
	ctx := context.Background()
	switch kind {
	case "pod":
		_, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	case "service":
		_, err = cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	case "configmap":
		_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	case "secret":
		_, err = cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	default:
		t.Fatalf("no kind %q", kind)
	}
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("reading %s %s/%s: %v", kind, ns, name, err)
	}
	return true
}

// TestSecondaryResourcesWithoutPod (issue 8, item 2): the ConfigMaps and
// Services the provider makes beside its Pods are listed as secondary
// resources, with their marks, owner and age, and InstanceGone exactly
// when no Pod of their name exists (one that lost our marks still counts);
// DeleteSecondary removes exactly the object listed, and leaves another
// installation's, a recreated one and a live instance's alone.
func TestSecondaryResourcesWithoutPod(t *testing.T) {
	cs := adminClient(t)
	ns := newNamespace(t, "secondary", nil)
	const installation = "secondary-test"
	var failed atomic.Bool
	raw := newAPIProvider(t, installation, Config{Namespace: ns}, nil)
	raw.wireSeam = failAfterPodDelete(&failed)
	b := boundary(raw)
	p, sl := b.Provider, b.Secondary
	if sl == nil {
		t.Fatal("the kubernetes provider is no provider.SecondaryLister")
	}
	ctx := t.Context()
	req := func(proxy, uid string) provider.CreateRequest {
		return provider.CreateRequest{Name: provider.InstanceName("team", proxy, uid, "s1"), Namespace: "team",
			ProxyName: proxy, UID: uid, Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8"}}
	}

	// Crash in a Delete, after the Pod.
	crashed := req("crashed", "uid-crashed")
	crashInDelete(t, cs, p, &failed, ns, crashed)
	// A Pod removed by hand: its ConfigMap and Service stay.
	vanished := req("vanished", "uid-vanished")
	if _, err := p.Create(ctx, vanished); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(context.Background(), vanished.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the vanished Pod gone", func() bool { return !exists(t, cs, "pod", ns, vanished.Name) })
	// Live.
	live := req("live", "uid-live")
	liveInst, err := p.Create(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	// Its Pod lost our marks (a human edited them): not ours, but it may
	// still mount the ConfigMap, so its instance is not gone.
	stripped := req("stripped", "uid-stripped")
	if _, err := p.Create(ctx, stripped); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(context.Background(), stripped.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels = map[string]string{"owner": "a-human"}
	if _, err := cs.CoreV1().Pods(ns).Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another installation's crash: never listed.
	otherB := boundary(newAPIProvider(t, "secondary-other", Config{Namespace: ns}, nil))
	other := otherB.Provider
	otherCrash := req("other", "uid-other")
	otherRaw := provider.Unwrap(other).(*Provider)
	var otherFailed atomic.Bool
	otherRaw.wireSeam = failAfterPodDelete(&otherFailed)
	crashInDelete(t, cs, other, &otherFailed, ns, otherCrash)

	list, err := sl.ListSecondary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req   provider.CreateRequest
		kinds []string
		gone  bool
	}{
		{crashed, []string{"configmap", "networkpolicy", "service"}, true}, // all left by the cut Delete
		{vanished, []string{"configmap", "networkpolicy", "service"}, true},
		{live, []string{"configmap", "networkpolicy", "service"}, false},
		{stripped, []string{"configmap", "networkpolicy", "service"}, false},
	} {
		got := secondariesOf(list, tc.req.Name)
		var kinds []string
		for k, s := range got {
			kinds = append(kinds, k)
			want := provider.Marks{Managed: true, UID: tc.req.UID, Installation: installation}
			if s.Marks != want || s.InstanceGone != tc.gone || s.InstanceID != instanceID(ns, tc.req.Name) ||
				s.CreatedAt.IsZero() || !strings.HasPrefix(s.ID, k+"/"+ns+"/"+tc.req.Name+"/") {
				t.Errorf("%s %s: %+v; want marks %+v, InstanceGone %t, InstanceID %s, a CreatedAt and an ID naming it",
					tc.req.ProxyName, k, s, want, tc.gone, instanceID(ns, tc.req.Name))
			}
		}
		slices.Sort(kinds)
		if !slices.Equal(kinds, tc.kinds) {
			t.Errorf("%s: kinds %v listed, want %v", tc.req.ProxyName, kinds, tc.kinds)
		}
	}
	if got := secondariesOf(list, otherCrash.Name); len(got) != 0 {
		t.Errorf("another installation's objects listed: %+v", got)
	}
	if len(list) != 12 {
		t.Errorf("%d secondaries listed, want 12: %+v", len(list), list)
	}
	for _, s := range list {
		if s.Kind == "pod" {
			t.Errorf("a Pod listed as a secondary: %+v", s)
		}
	}

	// The other installation's listing sees its own crash only, and its
	// DeleteSecondary leaves ours alone.
	otherList, err := otherB.Secondary.ListSecondary(ctx)
	if err != nil || len(otherList) != 3 {
		t.Errorf("the other installation lists %+v, %v; want its crash's ConfigMap, NetworkPolicy and Service", otherList, err)
	}
	for _, s := range otherList {
		if s.Instance != otherCrash.Name {
			t.Errorf("the other installation lists %+v, not of its own crash %s", s, otherCrash.Name)
		}
	}
	crashedCM := secondariesOf(list, crashed.Name)["configmap"]
	if err := otherB.Secondary.DeleteSecondary(ctx, crashedCM.ID); err != nil {
		t.Errorf("another installation's DeleteSecondary of ours: %v, want success", err)
	}
	if !exists(t, cs, "configmap", ns, crashed.Name) {
		t.Fatal("another installation deleted our ConfigMap")
	}

	// DeleteSecondary: exactly the listed object; gone is success.
	for _, s := range []provider.Secondary{crashedCM, secondariesOf(list, vanished.Name)["configmap"], secondariesOf(list, vanished.Name)["service"]} {
		if err := sl.DeleteSecondary(ctx, s.ID); err != nil {
			t.Errorf("DeleteSecondary(%s): %v", s.ID, err)
		}
		if exists(t, cs, s.Kind, ns, s.Instance) {
			t.Errorf("%s still exists after DeleteSecondary", s.ID)
		}
		if err := sl.DeleteSecondary(ctx, s.ID); err != nil {
			t.Errorf("DeleteSecondary(%s) again: %v, want success", s.ID, err)
		}
	}
	// Recreated under the same name (the next Create of the crashed
	// Proxy): the old ID does not reach the new object.
	if _, err := p.Create(ctx, crashed); err != nil {
		t.Fatal(err)
	}
	if err := sl.DeleteSecondary(ctx, crashedCM.ID); err != nil {
		t.Fatal(err)
	}
	if !exists(t, cs, "configmap", ns, crashed.Name) {
		t.Error("a stale secondary ID deleted the recreated ConfigMap")
	}
	for _, bad := range []string{"", "configmap", "pod/" + ns + "/" + live.Name + "/u", "deployment/" + ns + "/x/u", "configmap/" + ns + "/" + live.Name, liveInst.ID} {
		err := sl.DeleteSecondary(ctx, bad)
		var pe *provider.Error
		if !errors.Is(err, provider.ErrPermanent) || !errors.As(err, &pe) || pe.Provider != testProviderName || pe.Op != provider.OpDeleteSecondary {
			t.Errorf("DeleteSecondary(%q) = %v; want a Permanent error naming %s and %s", bad, err, testProviderName, provider.OpDeleteSecondary)
		}
	}
	for _, k := range []string{"pod", "configmap", "service"} {
		if !exists(t, cs, k, ns, live.Name) {
			t.Errorf("the live instance's %s is gone", k)
		}
	}
}

// TestDeleteRemovesEverySecondaryKind (issue 8, item 2): Delete removes the
// Pod and every kind ListSecondary lists, so an instance deleted through
// the contract leaves nothing for the collector.
func TestDeleteRemovesEverySecondaryKind(t *testing.T) {
	ns := newNamespace(t, "secondary-delete", nil)
	b := boundary(newAPIProvider(t, "secondary-delete", Config{Namespace: ns}, nil))
	p := b.Provider
	ctx := t.Context()
	// With users, so that every kind is made.
	inst, err := p.Create(ctx, provider.CreateRequest{Name: provider.InstanceName("team", "web", "uid-web", "s1"),
		Namespace: "team", ProxyName: "web", UID: "uid-web", Port: 3128,
		ClientAuth: provider.Sensitive(clientauthtest.File(t, "alice", "pw"))})
	if err != nil {
		t.Fatal(err)
	}
	sl := b.Secondary
	if sl == nil {
		t.Fatal("the kubernetes provider is no provider.SecondaryLister")
	}
	before, err := sl.ListSecondary(ctx)
	if err != nil || len(before) != len(secondaryKinds) {
		t.Fatalf("ListSecondary before Delete = %+v, %v; want one per kind (%d)", before, err, len(secondaryKinds))
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	after, err := sl.ListSecondary(ctx)
	if err != nil || len(after) != 0 {
		t.Errorf("ListSecondary after Delete = %+v, %v; want nothing", after, err)
	}
}

// PlantSecondary makes what a Delete cut after the Pod (or a Pod removed
// by hand) leaves: the instance's ConfigMap with the marks and the instance label,
// and no Pod. One Create already made is left as it is. It returns once
// the provider's cache holds a ConfigMap of its installation, as it holds
// any leftover the provider made long before a collector pass: made
// behind the cache's back, a listing just after missed it in 1 CI run
// (the next collector pass would find it; the suite asks this one).
func (b *apiBackend) PlantSecondary(t *testing.T, instance string, marks provider.Marks) {
	t.Helper()
	labels := marks.Labels()
	labels[labelInstance] = instance
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: instance, Namespace: b.ns, Labels: labels},
		Data:       map[string]string{confFile: "# planted\n"},
	}
	_, err := b.cs.CoreV1().ConfigMaps(b.ns).Create(context.Background(), cm, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("PlantSecondary(%q): %v", instance, err)
	}
	if marks.Installation != b.provider.opts.InstallationID {
		return // another installation's: never in this provider's cache
	}
	awaitSeen(t, b.provider, instanceID(b.ns, instance), true, "configmap")
}

var _ providertest.SecondaryPlanter = (*apiBackend)(nil)
