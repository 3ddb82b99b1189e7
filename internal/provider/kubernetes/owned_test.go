package kubernetes

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
)

// recordLists is a wire seam that records the label selector of every
// LIST (a GET of a collection) it passes on.
type recordLists struct {
	mu        sync.Mutex
	selectors []string
}

func (r *recordLists) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" && slices.Contains([]string{"pods", "services", "configmaps", "secrets", "networkpolicies"}, segs[len(segs)-1]) {
			r.mu.Lock()
			r.selectors = append(r.selectors, segs[len(segs)-1]+"?"+req.URL.Query().Get("labelSelector"))
			r.mu.Unlock()
		}
		return next.RoundTrip(req)
	})
}

// TestOwnerListing (issue 13): the owner listings return exactly one
// Proxy's Pods and secondary objects, of this installation, through LISTs
// whose selector names the Proxy's UID (so the API server filters them and
// a deletion pass reads a handful of objects, not the fleet's), with the
// same fields as ListByTag and ListSecondary; an empty or malformed UID is
// Permanent and reaches no API.
func TestOwnerListing(t *testing.T) {
	ns := newNamespace(t, "owned", nil)
	const installation = "owned-test"
	raw := newAPIProvider(t, installation, Config{Namespace: ns}, nil)
	lists := &recordLists{}
	raw.wireSeam = lists.wrap
	b := boundary(raw)
	p, ol := b.Provider, b.Owned
	ctx := t.Context()
	users := provider.Sensitive(clientauthtest.File(t, "alice", "pw")) // so every secondary kind exists
	req := func(proxy, uid, shape string) provider.CreateRequest {
		return provider.CreateRequest{Name: provider.InstanceName("team", proxy, uid, shape), Namespace: "team",
			ProxyName: proxy, UID: uid, Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8"}, ClientAuth: users}
	}
	// The Proxy being deleted has two instances (a replacement under way),
	// another Proxy one, and another installation one with the same UID.
	mine := []provider.CreateRequest{req("web", "uid-web", "s1"), req("web", "uid-web", "s2")}
	var ids []string
	for _, r := range append(mine, req("db", "uid-db", "s1")) {
		inst, err := p.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ID)
	}
	other := bounded(newAPIProvider(t, "owned-other", Config{Namespace: ns}, nil))
	if _, err := other.Create(ctx, req("web", "uid-web", "s3")); err != nil {
		t.Fatal(err)
	}

	// Once the cache saw them, the listings read no API (cache.go); the
	// listings below read live, as when the cache cannot say.
	for _, id := range ids {
		awaitSeen(t, raw, id, true)
	}
	lists.mu.Lock()
	lists.selectors = nil
	lists.mu.Unlock()
	cachedInsts, err := ol.ListOwnedInstances(ctx, "uid-web")
	if err != nil {
		t.Fatal(err)
	}
	cachedSecs, err := ol.ListOwnedSecondaries(ctx, "uid-web")
	if err != nil {
		t.Fatal(err)
	}
	lists.mu.Lock()
	if len(lists.selectors) != 1 || !strings.HasPrefix(lists.selectors[0], "pods?") {
		t.Errorf("the owner listings with the instances cached made LISTs %v, want the Pods' alone (always live)", lists.selectors)
	}
	lists.selectors = nil
	lists.mu.Unlock()
	raw.cache.bypass = func() bool { return true }
	insts, err := ol.ListOwnedInstances(ctx, "uid-web")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range insts {
		got = append(got, in.ID)
		if in.UID != "uid-web" || in.CreatedAt.IsZero() {
			t.Errorf("instance %+v: want UID uid-web and a CreatedAt", in)
		}
	}
	if want := ids[:2]; !slices.Equal(got, want) {
		t.Errorf("ListOwnedInstances(uid-web) = %v, want %v (sorted; not the other Proxy's, not the other installation's)", got, want)
	}
	secs, err := ol.ListOwnedSecondaries(ctx, "uid-web")
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(secondaryKinds); len(secs) != want || !slices.IsSortedFunc(secs, func(a, b provider.Secondary) int { return strings.Compare(a.ID, b.ID) }) {
		t.Errorf("ListOwnedSecondaries(uid-web) = %d secondaries %+v, want %d (each kind of both instances), sorted by ID", len(secs), secs, want)
	}
	wantMarks := provider.Marks{Managed: true, UID: "uid-web", Installation: installation}
	for _, s := range secs {
		if s.Marks != wantMarks || (s.Instance != mine[0].Name && s.Instance != mine[1].Name) ||
			s.InstanceID != instanceID(ns, s.Instance) || !strings.HasPrefix(s.ID, s.Kind+"/"+ns+"/"+s.Instance+"/") || s.CreatedAt.IsZero() {
			t.Errorf("secondary %+v: want the marks %+v, one of the Proxy's instances, its ID and a CreatedAt", s, wantMarks)
		}
	}
	// What a deletion pass costs: one LIST per kind, each selecting by the
	// UID, and no Pod listing for the secondaries.
	lists.mu.Lock()
	sels := slices.Clone(lists.selectors)
	lists.mu.Unlock()
	if len(sels) != 1+len(secondaryKinds) {
		t.Errorf("the two owner listings made %d LISTs %v, want %d (one per kind)", len(sels), sels, 1+len(secondaryKinds))
	}
	for _, s := range sels {
		if !strings.Contains(s, provider.MarkUID+"=uid-web") || !strings.Contains(s, provider.MarkInstallation+"="+installation) {
			t.Errorf("LIST %s does not select by the owner's UID and the installation", s)
		}
	}
	// The cache agrees with the API server.
	if !slices.Equal(cachedInsts, insts) || !slices.Equal(cachedSecs, secs) {
		t.Errorf("the cached owner listings %+v, %+v differ from the live ones %+v, %+v", cachedInsts, cachedSecs, insts, secs)
	}
	// The fleet listing agrees on the Proxy's secondaries.
	all, err := b.Secondary.ListSecondary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fleetIDs, ownedIDs []string
	for _, s := range all {
		if s.Marks.UID == "uid-web" {
			fleetIDs = append(fleetIDs, s.ID)
		}
	}
	for _, s := range secs {
		ownedIDs = append(ownedIDs, s.ID)
	}
	if !slices.Equal(fleetIDs, ownedIDs) {
		t.Errorf("owner listing %v differs from the fleet listing's objects of the UID %v", ownedIDs, fleetIDs)
	}

	lists.mu.Lock()
	lists.selectors = nil
	lists.mu.Unlock()
	for _, bad := range []string{"", "a,b", "uid with spaces"} {
		_, err1 := ol.ListOwnedInstances(ctx, bad)
		_, err2 := ol.ListOwnedSecondaries(ctx, bad)
		for _, err := range []error{err1, err2} {
			var pe *provider.Error
			if !errors.Is(err, provider.ErrPermanent) || !errors.As(err, &pe) || pe.Provider != testProviderName {
				t.Errorf("owner listing of UID %q: %v; want a Permanent error naming %s", bad, err, testProviderName)
			}
		}
	}
	if len(lists.selectors) != 0 {
		t.Errorf("malformed UIDs reached the API server: %v", lists.selectors)
	}
}
