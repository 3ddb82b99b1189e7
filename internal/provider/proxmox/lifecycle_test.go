package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestLifecycleOverFake: Create returns Provisioning at once, the VM runs
// with the agent's address, ListByTag sees it, Delete leaves nothing (VM,
// disks, seed ISO), and the request counts are what the note reports.
func TestLifecycleOverFake(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.fake.SetTaskPolls("qmclone", 5)
	in, err := e.p.Create(ctx, request("proxy-a", "11111111-2222-3333-4444-555555555555"))
	must(t, err)
	if in.State != provider.StateProvisioning {
		t.Fatalf("Create state = %s, want Provisioning", in.State)
	}
	e.fake.ClearRequests()
	if got, err := e.p.Get(ctx, in.ID); err != nil || got.State != provider.StateProvisioning {
		t.Fatalf("Get while provisioning = %+v, %v", got, err)
	}
	t.Logf("provisioning Get: %d requests", len(e.fake.Requests()))
	run := waitRunning(t, e.p, in.ID)
	if run.IP == "" || run.UID != "11111111-2222-3333-4444-555555555555" {
		t.Fatalf("running instance = %+v", run)
	}
	vmid, _, _ := parseID(in.ID)
	e.p.forgetResources()
	e.fake.ClearRequests()
	_, err = e.p.Get(ctx, in.ID)
	must(t, err)
	if n := len(e.fake.Requests()); n > 3 {
		t.Fatalf("running Get made %d requests (> 3): %v", n, e.fake.Requests())
	}
	t.Logf("running Get: %d requests", len(e.fake.Requests()))
	e.fake.ClearRequests()
	list, err := e.p.ListByTag(ctx)
	must(t, err)
	if len(list) != 1 || list[0].ID != in.ID {
		t.Fatalf("ListByTag = %+v", list)
	}
	t.Logf("ListByTag: %d requests", len(e.fake.Requests()))
	other := e.newProvider(t, "inst-b")
	if l, err := other.ListByTag(ctx); err != nil || len(l) != 0 {
		t.Fatalf("other installation lists %+v, %v", l, err)
	}
	if vols := e.fake.Volumes("pve1", "local"); !hasVolume(vols, seedName("proxy-a", testInstallation, "11111111-2222-3333-4444-555555555555")) {
		t.Fatalf("seed ISO not uploaded: %+v", vols)
	}
	must(t, e.p.Delete(ctx, in.ID))
	testenv.EventuallyNil(t, "VM gone", func() error {
		_, err := e.p.Get(ctx, in.ID)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("Get after Delete: %v", err)
	})
	testenv.EventuallyNil(t, "delete step done", func() error {
		if e.p.dels.Running("proxy-a") {
			return errors.New("delete step running")
		}
		return nil
	})
	if _, ok := e.fake.VM(vmid); ok {
		t.Fatalf("VM %d still exists", vmid)
	}
	if vols := e.fake.Volumes("pve1", "local"); hasVolume(vols, seedName("proxy-a", testInstallation, "11111111-2222-3333-4444-555555555555")) {
		t.Fatalf("seed ISO left behind: %+v", vols)
	}
	must(t, e.p.Delete(ctx, in.ID)) // gone is done
}

func hasVolume[V any](vols []V, name string) bool {
	for _, v := range vols {
		if strings.Contains(fmt.Sprintf("%+v", v), name) {
			return true
		}
	}
	return false
}

// A Delete while the create step's start task runs: Delete cancels the
// step, but PVE runs the submitted task on and powers the VM on after the
// delete step read it stopped; PVE then refuses the destroy ("is running -
// destroy failed"). The VM is stopped again and destroyed, and Get reads
// NotFound (it read Running forever, the delete step's failure unseen).
func TestDeleteWhileStartTaskRuns(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.fake.SetTaskPolls("qmstart", 30)
	// The step reads the start task once, then waits until Delete cancels
	// it: the 30 polls, 1 ms apart, used to be over before this test's
	// Get saw "start task running" (4 in 20 runs under -race and load).
	e.p.setWire(pauseStartTask())
	in, err := e.p.Create(ctx, request("proxy-startdel", "b1111111-2222-3333-4444-555555555555"))
	must(t, err)
	testenv.EventuallyNil(t, "the start task running", func() error {
		got, err := e.p.Get(ctx, in.ID)
		if err != nil {
			return err
		}
		if got.Progress != "start task running" {
			return fmt.Errorf("progress %q", got.Progress)
		}
		return nil
	})
	stop := e.fake.StartClock(time.Millisecond) // the start task ends on its own, as PVE's does
	t.Cleanup(stop)
	must(t, e.p.Delete(ctx, in.ID))
	vmid, _, _ := parseID(in.ID)
	testenv.EventuallyNil(t, "Get NotFound after Delete", func() error {
		_, err := e.p.Get(ctx, in.ID)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			return nil
		case err != nil:
			_ = e.p.Delete(ctx, in.ID) // the reconciler's next pass
		}
		return fmt.Errorf("Get after Delete: %v", err)
	})
	if _, ok := e.fake.VM(vmid); ok {
		t.Fatalf("VM %d still exists", vmid)
	}
}

// pauseStartTask is a wire seam under which the create step reads the
// start task's status once and its next read waits for the step's end: the
// step goes on following a running task (the fake's tasks move on with
// status reads and its clock) until it is cancelled.
func pauseStartTask() func(http.RoundTripper) http.RoundTripper {
	var reads atomic.Int32
	return func(next http.RoundTripper) http.RoundTripper {
		return rtFunc(func(req *http.Request) (*http.Response, error) {
			if httpobserve.OpOf(req.Context()) == httpobserve.OpCreateStep && req.Method == http.MethodGet &&
				strings.Contains(req.URL.Path, ":qmstart:") && strings.HasSuffix(req.URL.Path, "/status") && reads.Add(1) > 1 {
				<-req.Context().Done()
				return nil, req.Context().Err()
			}
			return next.RoundTrip(req)
		})
	}
}

// A Delete while the seed upload is in flight (seen once in the conformance
// suite under load: Get read NotFound and the seed ISO was still listed).
// PVE stores an upload it has received even when the client stops waiting
// for the answer, so an upload cancelled mid-flight could land after Delete
// had removed the seeds: the step sees the upload through (the cancel is
// honoured once it is answered), and nothing is left once Get says NotFound.
func TestDeleteDuringSeedUploadLeavesNoSeed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.fake.FailNext(fakepve.Fault{Method: "POST", Path: "nodes/*/storage/*/upload", Hold: 3})
	in, err := e.p.Create(ctx, request("proxy-updel", "c1111111-2222-3333-4444-555555555555"))
	must(t, err)
	testenv.Eventually(t, "the seed upload held by PVE", func() bool { return e.fake.Holding() == 1 })
	// The reconciler's Delete, bounded as its calls are; with the upload
	// seen through it may give up waiting for the step, and is called again.
	bounded, cancel := context.WithTimeout(ctx, time.Second)
	firstErr := e.p.Delete(bounded, in.ID)
	cancel()
	// Whatever that Delete started ends first; then PVE answers the upload.
	testenv.EventuallyNil(t, "the first delete's step done", func() error {
		if e.p.dels.Running("proxy-updel") {
			return errors.New("delete step running")
		}
		return nil
	})
	e.fake.Advance(3)                           // PVE answers the upload and starts moving the file in
	stop := e.fake.StartClock(time.Millisecond) // its tasks end on their own, as PVE's do
	t.Cleanup(stop)
	testenv.Eventually(t, "the upload answered and its task ended", func() bool {
		if e.fake.Holding() > 0 {
			return false
		}
		for _, tk := range e.fake.Tasks() {
			if tk.Running {
				return false
			}
		}
		return true
	})
	testenv.EventuallyNil(t, "Get NotFound after Delete", func() error {
		_, err := e.p.Get(ctx, in.ID)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			return nil
		case err != nil || firstErr != nil:
			firstErr = e.p.Delete(ctx, in.ID) // the reconciler's next pass
		}
		return fmt.Errorf("Get after Delete: %v", err)
	})
	testenv.EventuallyNil(t, "the delete step done", func() error {
		if e.p.dels.Running("proxy-updel") {
			return errors.New("delete step running")
		}
		return nil
	})
	if vols := e.fake.Volumes("pve1", "local"); hasVolume(vols, "proxy-updel") {
		t.Fatalf("seed ISO left after Get read NotFound: %+v", vols)
	}
}
