package proxmox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// plantRunning puts a running VM of ours on the fake, as a finished create
// leaves it; reporter: its tags say its seed installs the reporter.
func plantRunning(t *testing.T, e *env, vmid int, name, uid string, reporter bool) string {
	t.Helper()
	must(t, e.fake.PutVM(fakepve.VM{VMID: vmid, Node: "pve1", Running: true, Config: []fakepve.KV{
		{Key: "name", Value: name}, {Key: "agent", Value: "1"}, {Key: "memory", Value: "1024"},
		{Key: "net0", Value: "virtio=BC:24:11:00:00:42,bridge=vmbr0"},
		{Key: "tags", Value: e.p.tags(uid, time.Now(), reporter)}, {Key: "description", Value: e.p.description(uid)},
	}}))
	return formatID(vmid, name)
}

// Ready means the proxy answers (issue 22): a running VM with an address
// is not answering until its guest's reporter says so, and Get carries
// what the report says: not yet (with cloud-init's state), answering,
// stopped answering, and cloud-init's error line.
func TestGetServingFromTheGuestReport(t *testing.T) {
	e := newEnv(t)
	e.p.window = 0
	ctx := context.Background()
	id := plantRunning(t, e, 150, "proxy-serving", "61111111-2222-3333-4444-555555555555", true)
	get := func(what string) provider.Instance {
		t.Helper()
		in, err := e.p.Get(ctx, id)
		if err != nil {
			t.Fatalf("Get (%s): %v", what, err)
		}
		if in.State != provider.StateRunning || in.IP == "" {
			t.Fatalf("Get (%s) = %+v, want Running with an address", what, in)
		}
		return in
	}

	e.fake.RemoveGuestFile(150, servingreport.ReportPath)
	if in := get("no report"); in.Serving != provider.ServingNotAnswering || in.ServingDetail != notReportedYet {
		t.Errorf("before the reporter ran: %s %q, want NotAnswering %q", in.Serving, in.ServingDetail, notReportedYet)
	}

	now := time.Now().UTC().Truncate(time.Second)
	e.fake.SetGuestReport(150, servingreport.Report{Checked: now, CloudInit: servingreport.CloudInitRunning})
	if in := get("not yet"); in.Serving != provider.ServingNotAnswering || in.ServingDetail != "not answering yet (cloud-init: running)" {
		t.Errorf("Squid not up yet: %s %q", in.Serving, in.ServingDetail)
	}

	e.fake.SetGuestReport(150, servingreport.Report{Serving: true, Checked: now, Answered: now, CloudInit: servingreport.CloudInitDone})
	if in := get("serving"); in.Serving != provider.ServingAnswering || !in.LastAnswered.Equal(now) || in.SetupError != "" || in.Egress != (provider.Egress{}) {
		t.Errorf("serving: %s %q, last answered %v, egress %+v (no echo: none)", in.Serving, in.ServingDetail, in.LastAnswered, in.Egress)
	}

	// With the entry's echo, the guest's answer is the egress address.
	e.fake.SetGuestReport(150, servingreport.Report{Serving: true, Checked: now, Answered: now, CloudInit: servingreport.CloudInitDone,
		EgressIP: "203.0.113.7", EgressConfirmed: now, EgressChecked: now})
	want := provider.Egress{IP: "203.0.113.7", Source: provider.EgressFromEcho, Confirmed: now}
	if in := get("serving, with the echo's answer"); in.Egress != want {
		t.Errorf("egress %+v, want %+v", in.Egress, want)
	}

	later := now.Add(30 * time.Second)
	e.fake.SetGuestReport(150, servingreport.Report{Checked: later, Answered: now, CloudInit: servingreport.CloudInitDone})
	in := get("stopped answering")
	if in.Serving != provider.ServingNotAnswering || !in.LastAnswered.Equal(now) || !strings.HasPrefix(in.ServingDetail, "it last answered at ") {
		t.Errorf("Squid stopped: %s %q, last answered %v", in.Serving, in.ServingDetail, in.LastAnswered)
	}

	const line = "module 'scripts_user' failed: runcmd exited 1"
	e.fake.SetGuestReport(150, servingreport.Report{Checked: now, CloudInit: servingreport.CloudInitError, CloudInitError: line})
	if in := get("cloud-init failed"); in.Serving != provider.ServingNotAnswering || in.SetupError != line {
		t.Errorf("cloud-init failed: %s, SetupError %q, want %q", in.Serving, in.SetupError, line)
	}

	e.fake.SetGuestFile(150, servingreport.ReportPath, []byte("serving=perhaps\n"))
	if in := get("garbage"); in.Serving != provider.ServingNotAnswering || !strings.Contains(in.ServingDetail, "does not parse") {
		t.Errorf("an unparsable report: %s %q", in.Serving, in.ServingDetail)
	}

	e.fake.SetGuestReport(150, servingreport.Report{Serving: true, Checked: now, Answered: now})
	// The agent answers the interfaces, then goes away before the report.
	e.fake.FailNext(fakepve.Fault{Method: "GET", Path: "nodes/*/qemu/*/agent/file-read", Err: fakepve.GuestAgentNotRunning()})
	if in := get("agent gone"); in.Serving != provider.ServingNotAnswering || in.ServingDetail != agentNotAnswering {
		t.Errorf("agent down at the report: %s %q, want NotAnswering %q", in.Serving, in.ServingDetail, agentNotAnswering)
	}
	// An agent that is not up at all: Provisioning, and not answering.
	e.fake.SetAgent(150, fakepve.Agent{Mode: fakepve.AgentNotRunning})
	if in, err := e.p.Get(ctx, id); err != nil || in.State != provider.StateProvisioning || in.Serving != provider.ServingNotAnswering || in.ServingDetail != agentNotAnswering {
		t.Errorf("agent not running: %+v, %v", in, err)
	}
}

// A failure reading the report that is not the guest's answer is Get's
// error with PVE's class, so a serving Proxy stays as it was on a
// Transient one instead of turning not serving.
func TestGetServingReadFailures(t *testing.T) {
	e := newEnv(t)
	e.p.window = 0
	ctx := context.Background()
	id := plantRunning(t, e, 151, "proxy-hiccup", "71111111-2222-3333-4444-555555555555", true)
	if in, err := e.p.Get(ctx, id); err != nil || in.Serving != provider.ServingAnswering {
		t.Fatalf("the default guest serves: %+v, %v", in, err)
	}
	e.fake.FailNext(fakepve.Fault{Method: "GET", Path: "nodes/*/qemu/*/agent/file-read", Err: fakepve.QMPTimeout("guest-file-open")})
	if _, err := e.p.Get(ctx, id); !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "got timeout") {
		t.Errorf("agent timeout at the report: %v, want Transient", err)
	}
	e.fake.Revoke(fakepve.DefaultTokenID, "/vms/151", "VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted")
	if _, err := e.p.Get(ctx, id); !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "VM.GuestAgent.FileRead") {
		t.Errorf("a token without VM.GuestAgent.FileRead: %v, want Permanent naming the privilege", err)
	}
}

// A VM made before the reporter existed (no tagReporter) has no report to
// read: Get reports no signal, as before, with no file-read.
func TestGetServingOfAVMWithoutReporter(t *testing.T) {
	e := newEnv(t)
	e.p.window = 0
	id := plantRunning(t, e, 152, "proxy-legacy", "81111111-2222-3333-4444-555555555555", false)
	e.fake.RemoveGuestFile(152, servingreport.ReportPath)
	e.fake.ClearRequests()
	in, err := e.p.Get(context.Background(), id)
	if err != nil || in.State != provider.StateRunning || in.Serving != provider.ServingUnknown {
		t.Fatalf("Get of a VM without the reporter = %+v, %v; want Running, serving unknown", in, err)
	}
	if n := e.fake.Count("GET", "nodes/*/qemu/*/agent/file-read"); n != 0 {
		t.Errorf("Get read the report of a VM without the reporter (%d requests)", n)
	}
}

// Over the whole create: a new VM gets tagReporter with its seed, and
// reads not answering until its guest reports serving.
func TestCreatedVMServesOnceItsGuestReports(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	in, err := e.p.Create(ctx, request("proxy-new", "91111111-2222-3333-4444-555555555555"))
	must(t, err)
	vmid, _, err := parseID(in.ID)
	must(t, err)
	// The guest has not reported by the time the VM runs.
	waitVM(t, e.fake, vmid)
	e.fake.RemoveGuestFile(vmid, servingreport.ReportPath)
	run := waitRunning(t, e.p, in.ID)
	if run.Serving != provider.ServingNotAnswering || run.ServingDetail != notReportedYet {
		t.Fatalf("a new VM before its report: %s %q", run.Serving, run.ServingDetail)
	}
	vm, _ := e.fake.VM(vmid)
	if !hasTag(configValue(vm, "tags"), tagReporter) {
		t.Errorf("the created VM's tags %q lack %s", configValue(vm, "tags"), tagReporter)
	}
	now := time.Now()
	e.fake.SetGuestReport(vmid, servingreport.Report{Serving: true, Checked: now, Answered: now})
	e.p.forgetResources()
	if got, err := e.p.Get(ctx, in.ID); err != nil || got.Serving != provider.ServingAnswering {
		t.Fatalf("after the guest reported serving: %+v, %v", got, err)
	}
}

// waitVM waits for the fake to have VM vmid (its clone has started).
func waitVM(t *testing.T, fake *fakepve.Server, vmid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := fake.VM(vmid); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %d never appeared", vmid)
		}
		time.Sleep(time.Millisecond)
	}
}

// A create that resumes on a stopped VM keeps what its guest has: one that
// booted from a seed without the reporter (attached, no tagReporter) stays
// without the mark, since cloud-init runs vendor-data once per instance;
// one never booted from a seed, or marked, gets or keeps it.
func TestResumedCreateMarksOnlyAGuestThatGetsTheReporter(t *testing.T) {
	for _, tc := range []struct {
		name           string
		tagged, booted bool
		wantMark       bool
		wantServing    provider.Serving
	}{
		{"booted-without-reporter", false, true, false, provider.ServingUnknown},
		{"never-booted", false, false, true, provider.ServingAnswering},
		{"marked", true, true, true, provider.ServingAnswering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			req := request("proxy-"+tc.name, "a1111111-2222-3333-4444-555555555555")
			cfg := []fakepve.KV{{Key: "name", Value: req.Name}, {Key: "agent", Value: "1"}, {Key: "memory", Value: "1024"},
				{Key: "net0", Value: "virtio=BC:24:11:00:00:43,bridge=vmbr0"},
				{Key: "tags", Value: e.p.tags(req.UID, time.Now(), tc.tagged)}, {Key: "description", Value: e.p.description(req.UID)}}
			if tc.booted {
				cfg = append(cfg, fakepve.KV{Key: "ide2", Value: "local:iso/" + seedName(req.Name, testInstallation, req.UID) + ",media=cdrom"})
			}
			vmid := e.p.vmidFor(req.UID, 0)
			must(t, e.fake.PutVM(fakepve.VM{VMID: vmid, Node: "pve1", Config: cfg}))
			in, err := e.p.Create(ctx, req)
			must(t, err)
			run := waitRunning(t, e.p, in.ID)
			vm, _ := e.fake.VM(vmid)
			if got := hasTag(configValue(vm, "tags"), tagReporter); got != tc.wantMark {
				t.Errorf("tags %q: %s is %v, want %v", configValue(vm, "tags"), tagReporter, got, tc.wantMark)
			}
			if run.Serving != tc.wantServing {
				t.Errorf("serving %q (%s), want %q", run.Serving, run.ServingDetail, tc.wantServing)
			}
		})
	}
}
