package local

import (
	"context"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Get, ListByTag and Delete on instances of every kind of ownership.

func TestGet(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	req := request("get")
	created := mustCreate(t, p, req)
	got, err := p.Get(context.Background(), created.ID)
	if err != nil || got != created {
		t.Errorf("Get = %+v, %v; want %+v", got, err, created)
	}
	_, err = bounded(p).Get(context.Background(), instanceID("never-made"))
	wantClass(t, "Get of an unknown ID", err, provider.ErrNotFound)
	wantProviderError(t, err, provider.OpGet)

	// The name now holds an instance without our mark.
	stopServer(t, p, created.ID, true)
	plant(t, p, req.Name, &provider.Marks{Managed: true, UID: req.UID, Installation: "other"}, 0)
	_, err = p.Get(context.Background(), created.ID)
	wantClass(t, "Get of an instance that lost our mark", err, provider.ErrNotFound)
}

func TestListByTagListsOursOnly(t *testing.T) {
	before := time.Now()
	p := newTestProvider(t, testInstallation, 24)
	b := mustCreate(t, p, request("list-b"))
	a := mustCreate(t, p, request("list-a"))
	plant(t, p, "unmarked", nil, 0)
	plant(t, p, "unmanaged", &provider.Marks{UID: "u", Installation: testInstallation}, 0)
	plant(t, p, "foreign", &provider.Marks{Managed: true, UID: "u", Installation: "other"}, testPort())
	stoppedUID := "uid-stopped"
	plant(t, p, "stopped", &provider.Marks{Managed: true, UID: stoppedUID, Installation: testInstallation}, 0)

	list, err := p.ListByTag(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Instance{a, b, {ID: instanceID("stopped"), UID: stoppedUID}}
	if len(list) != len(want) {
		t.Fatalf("ListByTag = %+v, want %d instances", list, len(want))
	}
	for i, w := range want {
		got := list[i]
		if got.ID != w.ID || got.UID != w.UID || got.State != "" || got.IP != "" {
			t.Errorf("list[%d] = %+v, want ID %s UID %s and no state or IP", i, got, w.ID, w.UID)
		}
		if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now()) {
			t.Errorf("list[%d].CreatedAt = %v, outside the test", i, got.CreatedAt)
		}
	}
}

func TestDelete(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	ctx := context.Background()
	inst := mustCreate(t, p, request("del"))
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := p.Get(ctx, inst.ID)
	wantClass(t, "Get after Delete", err, provider.ErrNotFound)
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Errorf("second Delete: %v, want success", err)
	}
	// The address is free again the moment Delete returns.
	if again := mustCreate(t, p, request("del-next")); again.IP != inst.IP {
		t.Errorf("next instance got %s, want the freed %s", again.IP, inst.IP)
	}

	// Another installation's instance is left alone.
	plant(t, p, "foreign", &provider.Marks{Managed: true, UID: "u", Installation: "other"}, testPort())
	if err := p.Delete(ctx, instanceID("foreign")); err != nil {
		t.Errorf("Delete of a foreign instance: %v, want success (ours is gone)", err)
	}
	p.mu.Lock()
	in, ok := p.instances["foreign"]
	p.mu.Unlock()
	if !ok || !in.srv.alive() {
		t.Errorf("Delete touched another installation's instance")
	}
}

// A Delete whose ctx ends while connections drain reports Transient, but
// the instance is already closed and forgotten, so a retry succeeds.
func TestDeleteDrainCutShort(t *testing.T) {
	p := newTestProvider(t, testInstallation, 24)
	req := request("drain")
	inst := mustCreate(t, p, req)
	// Hold a handler slot, as a connection that will not end would: the
	// drain can then only end by ctx.
	p.mu.Lock()
	srv := p.instances[req.Name].srv
	p.mu.Unlock()
	if !srv.enter() {
		t.Fatal("server closing already")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The ctx ends after Delete started, past its up-front ctx check.
	p.fault = func(_ context.Context, op string) error {
		if op == provider.OpDelete {
			cancel()
		}
		return nil
	}
	err := bounded(p).Delete(ctx, inst.ID)
	wantClass(t, "Delete cut short while draining", err, provider.ErrTransient)
	wantProviderError(t, err, provider.OpDelete)
	p.fault = nil

	_, err = p.Get(context.Background(), inst.ID)
	wantClass(t, "Get after the cut-short Delete", err, provider.ErrNotFound)
	if again := mustCreate(t, p, request("drain-next")); again.IP != inst.IP {
		t.Errorf("next instance got %s, want the freed %s", again.IP, inst.IP)
	}
	srv.active.Done() // the connection ends
	<-srv.finished
	if err := p.Delete(context.Background(), inst.ID); err != nil {
		t.Errorf("retried Delete: %v, want success", err)
	}
}
