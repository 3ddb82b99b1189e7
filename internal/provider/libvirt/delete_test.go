package libvirt

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// instanceVolumeNames are the pool's volumes of instance name.
func instanceVolumeNames(h *fakeHost, name string) []string {
	var out []string
	for _, v := range poolVolumeNames(h) {
		if strings.HasPrefix(v, name+volumeSep) {
			out = append(out, v)
		}
	}
	return out
}

// Delete leaves nothing of the instance whatever is already gone: the
// domain running or shut off, only the volumes (a create interrupted
// before define), only the domain, or nothing; the image cache stays.
func TestDeleteEveryAlreadyGoneCase(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p *Provider, h *fakeHost, name string)
	}{
		{"running", func(t *testing.T, p *Provider, h *fakeHost, name string) { createRunning(t, p, h, name) }},
		{"shut off", func(t *testing.T, p *Provider, h *fakeHost, name string) {
			createRunning(t, p, h, name)
			setDomainState(h, name, libvirt.DomainShutoff)
		}},
		{"volumes only", func(t *testing.T, p *Provider, h *fakeHost, name string) {
			createRunning(t, p, h, name)
			h.mu.Lock()
			delete(h.domains, name)
			h.mu.Unlock()
		}},
		{"domain only", func(t *testing.T, p *Provider, h *fakeHost, name string) {
			createRunning(t, p, h, name)
			h.mu.Lock()
			for _, v := range config.SortedKeys(h.pools[DefaultPool].vols) {
				if strings.HasPrefix(v, name) {
					delete(h.pools[DefaultPool].vols, v)
				}
			}
			h.mu.Unlock()
		}},
		{"nothing", func(t *testing.T, p *Provider, h *fakeHost, name string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newImageServer(t)
			h := newFakeHost("h1")
			p := newLifecycleProvider(t, srv, h)
			name := "proxy-team-a-egress-0123456789"
			tc.setup(t, p, h, name)
			id := formatID("h1", name)
			if err := p.Delete(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			if _, ok := domainState(h, name); ok {
				t.Fatal("the domain is still there")
			}
			if vols := instanceVolumeNames(h, name); len(vols) != 0 {
				t.Fatalf("volumes left: %v", vols)
			}
			if _, err := p.Get(context.Background(), id); !errors.Is(err, provider.ErrNotFound) {
				t.Fatalf("Get after Delete: %v, want NotFound", err)
			}
			// Again: already gone succeeds.
			if err := p.Delete(context.Background(), id); err != nil {
				t.Fatalf("second Delete: %v", err)
			}
		})
	}
}

// Delete cancels the create step in flight and waits for it before it
// removes anything, so the step cannot re-create what Delete removed.
func TestDeleteCancelsTheCreateStepFirst(t *testing.T) {
	srv := newImageServer(t)
	srv.gate = make(chan struct{}) // the download hangs until its ctx ends
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"
	inst, err := p.Create(ctx, testRequest(name))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the download began", func() bool { return srv.gets.Load() == 1 })
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if p.steps.Poll(name).Running {
		t.Fatal("the create step still runs after Delete")
	}
	if vols := instanceVolumeNames(h, name); len(vols) != 0 {
		t.Fatalf("volumes left: %v", vols)
	}
	if _, ok := domainState(h, name); ok {
		t.Fatal("a domain was defined")
	}
}

// A domain under the instance's name that is not this installation's is
// left alone by Delete.
func TestDeleteLeavesAForeignDomain(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"
	b, err := p.table.get(ctx, p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.DomainDefineXML(ctx, "<domain type='qemu'><name>"+name+"</name></domain>"); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, formatID("h1", name)); err != nil {
		t.Fatal(err)
	}
	if _, ok := domainState(h, name); !ok {
		t.Fatal("Delete removed a domain that is not ours")
	}
}

// Seed gap (kvm, kvm2): "GC blind spots: ... VMs on a host removed from
// the config, which Delete treats as done." Delete and Get of an instance
// on a host no longer configured are Permanent, with what to do.
func TestGapVMsOnARemovedHostAreTreatedAsDeleted(t *testing.T) {
	srv := newImageServer(t)
	p := newLifecycleProvider(t, srv, newFakeHost("h1"))
	id := formatID("gone", "proxy-team-a-egress-0123456789")
	err := p.Delete(context.Background(), id)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), `host "gone", which is no longer in this entry's hosts (h1)`) ||
		!strings.Contains(err.Error(), "re-add the host") || !strings.Contains(err.Error(), "force-release") {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := p.Get(context.Background(), id); !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("Get: %v, want Permanent (NotFound would make a second instance and forget the first)", err)
	}
}

// Seed gap (kvm, kvm2): "GC blind spots: volumes without a domain are
// invisible to GC." The overlay and seed of an instance with no domain are
// secondary resources with InstanceGone; while the domain exists, or its
// create step runs, they are not gone; DeleteSecondary removes one, and
// refuses while the instance exists again.
func TestGapVolumesWithoutADomainAreInvisibleToGC(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"
	inst := createRunning(t, p, h, name)

	secs, err := p.ListSecondary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 2 {
		t.Fatalf("secondaries of a running instance: %+v", secs)
	}
	for _, s := range secs {
		if s.InstanceGone || s.Instance != name || s.InstanceID != inst.ID || s.Marks.UID != inst.UID || !s.Marks.Managed || s.Marks.Installation != "test" {
			t.Fatalf("secondary of a running instance: %+v", s)
		}
	}
	if err := p.DeleteSecondary(ctx, secs[0].ID); !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "exists again") {
		t.Fatalf("DeleteSecondary while the domain exists: %v", err)
	}

	// The domain is removed by hand: its volumes are orphans now.
	h.mu.Lock()
	delete(h.domains, name)
	h.mu.Unlock()
	secs, err = p.ListSecondary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, s := range secs {
		if !s.InstanceGone {
			t.Fatalf("orphan not reported gone: %+v", s)
		}
		kinds = append(kinds, s.Kind)
		if err := p.DeleteSecondary(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{kindOverlay, kindSeed}) {
		t.Fatalf("kinds: %v", kinds)
	}
	if vols := instanceVolumeNames(h, name); len(vols) != 0 {
		t.Fatalf("volumes left: %v", vols)
	}
	// Another installation's volumes, and the image cache, are not listed.
	secs, err = p.ListSecondary(ctx)
	if err != nil || len(secs) != 0 {
		t.Fatalf("after the collection: %+v, %v", secs, err)
	}
	if err := p.DeleteSecondary(ctx, "nonsense"); !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("malformed ID: %v", err)
	}
}

// Delete right after a cancelled create step leaves nothing, even when a
// call of the step is still running on the host (seen on the real
// libvirtd: a volume created after Delete had listed the pool): the step
// is stopped between calls, so Delete waits for the call (Transient while
// it runs) and then finds what it made.
func TestDeleteWaitsForTheStepsCallOnTheHost(t *testing.T) {
	srv := newImageServer(t)
	h := newFakeHost("h1")
	p := newLifecycleProvider(t, srv, h)
	ctx := context.Background()
	name := "proxy-team-a-egress-0123456789"
	gate := h.hold("StorageVolCreateXML") // the seed's volume, the step's first write
	inst, err := p.Create(ctx, testRequest(name))
	if err != nil {
		t.Fatal(err)
	}
	<-gate.arrived
	err = p.Delete(ctx, inst.ID)
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "still stopping") {
		t.Fatalf("Delete while the step's call runs on the host: %v, want Transient", err)
	}
	gate.open()
	testenv.EventuallyNil(t, "Delete succeeds once the call ended", func() error { return p.Delete(ctx, inst.ID) })
	if vols := instanceVolumeNames(h, name); len(vols) != 0 {
		t.Fatalf("volumes left after Delete returned nil: %v", vols)
	}
	if _, ok := domainState(h, name); ok {
		t.Fatal("a domain was defined")
	}
}
