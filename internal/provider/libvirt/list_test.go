package libvirt

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// Seed gap (kvm, kvm2): "One unreachable host fails the whole list." A
// host that cannot be dialled is left out, logged and counted; the other
// host's instances are listed. Only when every host fails is it an error.
func TestGapOneUnreachableHostFailsTheWholeList(t *testing.T) {
	srv := newImageServer(t)
	up, down := newFakeHost("h1"), newFakeHost("h2")
	p := newLifecycleProvider(t, srv, up, down)
	name := "proxy-team-a-egress-0123456789"
	req := testRequest(name)
	req.Placement.Zone = "h1"
	ctx := context.Background()
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, p)
	down.dialErr = newDialError("h2", "192.0.2.2:22", stageTCP, errors.New("connect: connection refused"))

	var logs strings.Builder
	ctx = logr.NewContext(ctx, funcr.New(func(prefix, args string) { logs.WriteString(args + "\n") }, funcr.Options{}))
	before := testutil.ToFloat64(hostListFailures.WithLabelValues("vms", "h2", provider.OpList))
	insts, err := p.ListByTag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].ID != formatID("h1", name) || insts[0].UID != req.UID || insts[0].CreatedAt.IsZero() {
		t.Fatalf("ListByTag: %+v", insts)
	}
	if got := testutil.ToFloat64(hostListFailures.WithLabelValues("vms", "h2", provider.OpList)); got != before+1 {
		t.Errorf("failure metric: %v, want %v", got, before+1)
	}
	if !strings.Contains(logs.String(), `"host"="h2"`) || !strings.Contains(logs.String(), "could not be listed") {
		t.Errorf("no log line names the failed host:\n%s", logs.String())
	}

	up.mu.Lock()
	up.dialErr = down.dialErr
	conns := slices.Clone(up.conns)
	up.mu.Unlock()
	for _, c := range conns {
		c.kill() // the pooled connection drops; the redial fails
	}
	if _, err := p.ListByTag(context.Background()); !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("every host down: %v, want the Transient dial error", err)
	}
}

// ListByTag keeps this installation's managed domains only, active and
// inactive, and reads their marks and nothing else: no state or address
// RPC (the collector reads ID, UID and CreatedAt).
func TestListByTagReadsMarksOnly(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	ours := "proxy-team-a-egress-0123456789"
	createRunning(t, p, h, ours)
	stopped := "proxy-team-a-stopped-0123456789"
	createRunning(t, p, h, stopped)
	setDomainState(h, stopped, libvirt.DomainShutoff) // inactive domains are listed too
	b, err := p.table.get(ctx, p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := buildMetadata(provider.Marks{Managed: true, Installation: "other", UID: "u"}, p.now(), "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	for name, x := range map[string]string{
		"unmarked":     "<domain><name>unmarked</name></domain>",
		"foreign":      "<domain><name>foreign</name><metadata>" + foreign + "</metadata></domain>",
		"unparsable-x": "<domain><name>unparsable-x</name><metadata><instance xmlns='" + metadataURI + "'><uid>u</metadata></domain>",
	} {
		if _, err := b.DomainDefineXML(ctx, x); err != nil && name != "unparsable-x" {
			t.Fatal(err)
		}
	}
	before := len(h.callLog())
	insts, err := p.ListByTag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range insts {
		ids = append(ids, in.ID)
		if in.State != "" || in.IP != "" {
			t.Errorf("ListByTag read state or address: %+v", in)
		}
	}
	slices.Sort(ids)
	if want := []string{formatID("h1", ours), formatID("h1", stopped)}; !slices.Equal(ids, want) {
		t.Fatalf("listed %v, want %v", ids, want)
	}
	for _, c := range h.callLog()[before:] {
		rpc := c[strings.Index(c, ":")+1:]
		switch rpc {
		case "ConnectListAllDomains", "DomainGetMetadata", "StoragePoolLookupByName", "StoragePoolListAllVolumes":
		default:
			t.Errorf("ListByTag made %s", rpc)
		}
	}
}

// ListByTag lists an instance from its first moment: while its create
// step runs (before the host shows anything of it), and once it was
// interrupted with its volumes on the host (no domain yet), so the
// reconciler's sweep and the collector see it.
func TestListByTagListsUnfinishedInstances(t *testing.T) {
	srv := newImageServer(t)
	srv.gate = make(chan struct{})
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"
	req := testRequest(name)
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	listed := func() []provider.Instance {
		t.Helper()
		insts, err := p.ListByTag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return insts
	}
	if got := listed(); len(got) != 1 || got[0].ID != inst.ID || got[0].UID != req.UID || got[0].CreatedAt.IsZero() {
		t.Fatalf("while the step runs: %+v", got)
	}
	// The operator stops mid-download: a fresh provider sees the seed.
	testenv.Eventually(t, "the seed is written", func() bool { return len(instanceVolumeNames(h, name)) == 1 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	fresh := newLifecycleProvider(t, srv, h)
	insts, err := fresh.ListByTag(ctx)
	if err != nil || len(insts) != 1 || insts[0].ID != inst.ID || insts[0].UID != req.UID {
		t.Fatalf("after the interruption: %+v, %v", insts, err)
	}
	got, err := fresh.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateStopped || got.Progress != progressInterrupted {
		t.Fatalf("Get of the interrupted instance: %+v, %v", got, err)
	}
}
