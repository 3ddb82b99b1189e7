package controller

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// proxmoxEntry is a registry entry of the real proxmox provider over the
// fake PVE API (TLS with its CA, an API token file), behind the method
// boundary as the registry builds it; tune, when given, changes the
// provider's config first.
func proxmoxEntry(t *testing.T, fake *fakepve.Server, fullClone bool, tune ...func(*proxmox.Config)) *registry.Entry {
	t.Helper()
	tokenFile, caFile, err := fake.WriteCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxmox.Config{URL: fake.URL(), TokenFile: tokenFile, CAFile: caFile,
		Nodes: []string{"pve1"}, Templates: map[string]int{"debian-12": 9000}, ISOStorage: "local", FullClone: fullClone}
	for _, f := range tune {
		f(&cfg)
	}
	p, err := proxmox.New("pve", cfg, providerOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	b := provider.WithBoundary("pve", proxmox.Type, p)
	return &registry.Entry{Name: "pve", Type: proxmox.Type, Provider: b.Provider, Checker: b.Checker,
		Secondary: b.Secondary, PollInterval: proxmox.PollInterval}
}

var cloneProgress = regexp.MustCompile(`clone task [0-9]+%`)

// TestProxmoxClonesProvisionTogether: on the real API server, with the
// real proxmox provider over the fake PVE API, 10 Proxies whose clones
// run until the test let them go (full clones, whose disk copy PVE reports
// in percent, read at the provider's 1 s task poll, as PVE's own clients
// poll) are all Provisioning with the clone's progress at the same time, with all 10 clone tasks running at once on
// PVE, while the reconciler has 2 workers: no worker waits for a clone (the
// seed's Create blocked until the VM ran, so 2 workers cloned 2 VMs at a
// time). Then all reach Ready, and deleting them leaves only the template.
func TestProxmoxClonesProvisionTogether(t *testing.T) {
	const n = 10
	fake := fakepve.New().Start()
	t.Cleanup(fake.Close)
	// The clones run until the test saw them all at once (a fixed 30
	// polls of 1 s let the first ones end before a loaded CI machine had
	// made the last: the snapshot below never came).
	fake.SetTaskPolls("qmclone", 100000)
	m := startManager(t, &staticProviders{entries: map[string]*registry.Entry{"pve": proxmoxEntry(t, fake, true)}}, 2, Changes{})
	ctx := context.Background()
	for i := range n {
		m.create(t, newProxy(fmt.Sprintf("px-%d", i), "pve"))
	}

	list := func() ([]egressv1.Proxy, error) {
		var l egressv1.ProxyList
		if err := env.Client.List(ctx, &l, client.InNamespace(m.ns)); err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	// One snapshot: every Proxy Provisioning with the clone's progress in
	// its condition, and every clone task running on PVE.
	var clonesRunning int
	testenv.EventuallyNilWithin(t, 2*time.Minute, "all Proxies Provisioning with clone progress at once", func() error {
		items, err := list()
		if err != nil {
			return err
		}
		var waiting []string
		for _, px := range items {
			if readyReason(&px) != "False/"+egressv1.ReasonProvisioning || !cloneProgress.MatchString(conditionMessage(&px)) {
				waiting = append(waiting, fmt.Sprintf("%s: %s %q", px.Name, readyReason(&px), conditionMessage(&px)))
			}
		}
		if len(items) != n || len(waiting) > 0 {
			return fmt.Errorf("%d Proxies, not yet: %v", len(items), waiting)
		}
		clonesRunning = 0
		for _, tk := range fake.Tasks() {
			if tk.Type == "qmclone" && tk.Running {
				clonesRunning++
			}
		}
		return nil
	})
	if clonesRunning != n {
		t.Errorf("%d clone tasks running while all %d Proxies showed clone progress, want %d", clonesRunning, n, n)
	}
	items, err := list()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("e.g. %s: %s", items[0].Name, conditionMessage(&items[0]))
	held := time.Now()
	fake.EndSoon("qmclone")

	var readyAt []time.Time
	testenv.EventuallyNilWithin(t, 3*time.Minute, "all Proxies Ready", func() error {
		items, err := list()
		if err != nil {
			return err
		}
		readyAt = readyAt[:0]
		for _, px := range items {
			if !isReady(&px) {
				return fmt.Errorf("%s: %s %q", px.Name, readyReason(&px), conditionMessage(&px))
			}
			readyAt = append(readyAt, meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady).LastTransitionTime.Time)
		}
		return nil
	})
	sort.Slice(readyAt, func(i, j int) bool { return readyAt[i].Before(readyAt[j]) })
	// A figure, not an assertion: the clones were let go together, and
	// one after another would be one boot's time apart each.
	t.Logf("Ready: first to last %s apart, the last %s after the clones were let go",
		readyAt[len(readyAt)-1].Sub(readyAt[0]), readyAt[len(readyAt)-1].Sub(held).Round(time.Second))
	creates := fake.Requests()
	t.Logf("PVE requests until all %d Ready: %d (%.1f per Proxy): %s", n, len(creates), float64(len(creates))/n, requestSummary(creates))

	fake.ClearRequests()
	for _, px := range items {
		px := px
		if err := env.Client.Delete(ctx, &px); err != nil {
			t.Fatal(err)
		}
	}
	testenv.EventuallyNilWithin(t, 2*time.Minute, "all Proxies gone", func() error {
		items, err := list()
		if err != nil {
			return err
		}
		if len(items) > 0 {
			return fmt.Errorf("%d Proxies left, e.g. %s %q", len(items), items[0].Name, conditionMessage(&items[0]))
		}
		return nil
	})
	if ids := fake.VMIDs(); len(ids) != 1 || ids[0] != 9000 {
		t.Errorf("VMs left after the Proxies were deleted: %v, want only the template 9000", ids)
	}
	for _, v := range fake.Volumes("pve1", "local") {
		if s := fmt.Sprintf("%+v", v); strings.Contains(s, "px-") {
			t.Errorf("volume left after the Proxies were deleted: %s", s)
		}
	}
	deletes := fake.Requests()
	t.Logf("PVE requests from the deletes until all %d gone: %d (%.1f per Proxy): %s", n, len(deletes), float64(len(deletes))/n, requestSummary(deletes))
}

// requestSummary counts requests by method and path shape (VMIDs, names
// and UPIDs folded), most frequent first.
func requestSummary(rs []fakepve.Request) string {
	fold := regexp.MustCompile(`/qemu/[0-9]+|/tasks/[^/]+|/content/.+$`)
	by := map[string]int{}
	for _, r := range rs {
		p := strings.TrimPrefix(r.Path, "/api2/json")
		p = fold.ReplaceAllStringFunc(p, func(s string) string { return s[:strings.LastIndex(s, "/")] + "/*" })
		by[r.Method+" "+p]++
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return by[keys[i]] > by[keys[j]] || by[keys[i]] == by[keys[j]] && keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, by[k])
	}
	return strings.Join(parts, ", ")
}
