package proxmox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestConformance runs the shared contract suite against the provider over
// the real client and fakepve (TLS, token file, CA file); a fresh fake per
// case. The fake's tasks advance as the provider polls them.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Name: "pve-test",
		Type: Type,
		New: func(t *testing.T, installation string) (provider.Provider, providertest.Backend) {
			e := newEnv(t)
			// Tasks run on wall time, as PVE's do, so a task nobody polls
			// (a cancelled create's clone) still ends.
			stop := e.fake.StartClock(5 * time.Millisecond)
			t.Cleanup(stop)
			b := &fakeBackend{env: e, installation: installation}
			return b.newProvider(t), b
		},
		Request: func(_ *testing.T, proxyName, uid string) provider.CreateRequest {
			return provider.CreateRequest{Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8"}}
		},
		ClockSkew:     providertest.DefaultClockSkew,
		StaticAddress: providertest.StaticAddressFor(Profile()),
	})
}

type fakeBackend struct {
	env          *env
	installation string
	faults       providertest.Faults

	holds providertest.StepHolds // the seed upload is the held request

	latest providertest.Restartable[*Provider]
}

func (b *fakeBackend) newProvider(t *testing.T) *Provider {
	p := b.env.newProvider(t, b.installation)
	p.window = 0 // every Get reads, so a queued fault meets it
	p.setWire(b.wire)
	p.onStepStarted = b.holds.StepStarted
	return b.latest.Built(p)
}

// Restart stops the provider as a killed process stops (its steps end
// where they are; the fake's tasks run on) and returns a fresh one over
// the same fake.
func (b *fakeBackend) Restart(t *testing.T) provider.Provider {
	return b.latest.Restart(t, b.newProvider)
}

func (b *fakeBackend) HoldCreate(t *testing.T, name string) providertest.Hold {
	return b.holds.Hold(name)
}

// holdUpload blocks a seed upload of a held instance until its release;
// the returned fault (nil: none) is the upload's answer.
func (b *fakeBackend) holdUpload(req *http.Request) (*fakepve.Error, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/upload") || req.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	held, class, err := b.holds.Wait(req.Context(), func(name string) bool {
		return bytes.Contains(body, []byte(`filename="`+name+seedSep))
	})
	if !held || err != nil || class == nil {
		return nil, err
	}
	return syncFault(class), nil
}

var (
	_ providertest.Backend   = (*fakeBackend)(nil)
	_ providertest.Inspector = (*fakeBackend)(nil)
	_ providertest.Stopper   = (*fakeBackend)(nil)

	_ providertest.SecondaryPlanter = (*fakeBackend)(nil)
	_ providertest.Slow             = (*fakeBackend)(nil)
	_ providertest.Restarter        = (*fakeBackend)(nil)
)

// PlantSecondary puts a seed ISO of the instance named instance with marks
// on the first node's isoStorage, as an upload left behind would be.
func (b *fakeBackend) PlantSecondary(t *testing.T, instance string, marks provider.Marks) {
	t.Helper()
	file := seedName(instance, marks.Installation, marks.UID)
	must(t, b.env.fake.PutVolume(fakepve.Volume{Node: b.env.cfg.Nodes[0], Storage: b.env.cfg.ISOStorage, Name: "iso/" + file,
		Data: []byte("planted seed of " + instance)}))
}

// syncFault is PVE's answer the provider must classify as class, with the
// captured texts.
func syncFault(class error) *fakepve.Error {
	switch class {
	case provider.ErrNotFound:
		return &fakepve.Error{Status: 500, Message: "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist\n"}
	case provider.ErrPermanent:
		return &fakepve.Error{Status: 403, Message: "Permission check failed (/vms/100, VM.Audit)\n"}
	case provider.ErrQuotaExceeded:
		return &fakepve.Error{Status: 500, Message: "unable to get any free VMID in range [100, 999999999]\n"}
	default:
		return &fakepve.Error{Status: 500, Message: "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout\n"}
	}
}

func (b *fakeBackend) wire(next http.RoundTripper) http.RoundTripper {
	return rtFunc(func(req *http.Request) (*http.Response, error) {
		op := httpobserve.OpOf(req.Context())
		if op != "" {
			injected, err := b.faults.Next(req.Context(), op)
			if err != nil {
				return nil, err
			}
			if injected != nil {
				// Answered here, in PVE's form, rather than queued in the
				// fake by path: a step's concurrent call to the same path
				// would take it.
				return pveAnswer(req, syncFault(injected)), nil
			}
		}
		fault, err := b.holdUpload(req)
		if err != nil {
			return nil, err
		}
		if fault != nil {
			return pveAnswer(req, fault), nil
		}
		return next.RoundTrip(req)
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (b *fakeBackend) FailNext(t *testing.T, op string, class error) { b.faults.FailNext(op, class) }

func (b *fakeBackend) Block(t *testing.T, op string) func() { return b.faults.Block(op) }

func (b *fakeBackend) vmidByName(name string) (int, bool) {
	for _, id := range b.env.fake.VMIDs() {
		if vm, ok := b.env.fake.VM(id); ok && configValue(vm, "name") == name {
			return id, true
		}
	}
	return 0, false
}

func (b *fakeBackend) Vanish(t *testing.T, id string) {
	vmid, _, err := parseID(id)
	must(t, err)
	c := b.env.fake.Client()
	// Stopped and destroyed by hand; again while a create step's start
	// task, still ending, powers it back on.
	testenv.EventuallyNil(t, fmt.Sprintf("VM %d destroyed behind the provider's back", vmid), func() error {
		b.env.fake.SetVMRunning(vmid, "")
		req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("%s/nodes/pve1/qemu/%d?purge=1", b.env.fake.URL(), vmid), nil)
		req.Header.Set("Authorization", b.env.fake.Token())
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		b.env.fake.Settle()
		if _, ok := b.env.fake.VM(vmid); ok {
			return fmt.Errorf("VM %d still there (%s)", vmid, resp.Status)
		}
		return nil
	})
}

func (b *fakeBackend) Plant(t *testing.T, name string, marks *provider.Marks) {
	cfg := []fakepve.KV{{Key: "name", Value: name}, {Key: "memory", Value: "512"}}
	if marks != nil {
		m := *marks
		cfg = append(cfg, fakepve.KV{Key: "description", Value: fmt.Sprintf("%s=%v\n%s=%s\n%s=%s\n", provider.MarkManaged, map[bool]string{true: "true"}[m.Managed], provider.MarkUID, m.UID, provider.MarkInstallation, m.Installation)})
		var tags []string
		if m.Managed {
			tags = append(tags, tagManaged)
		}
		tags = append(tags, installTag(m.Installation))
		if m.UID != "" {
			tags = append(tags, uidTag(m.UID))
		}
		cfg = append(cfg, fakepve.KV{Key: "tags", Value: strings.Join(tags, ";")})
	}
	vmid := 100
	for _, id := range b.env.fake.VMIDs() {
		if id >= vmid && id < 9000 {
			vmid = id + 1
		}
	}
	must(t, b.env.fake.PutVM(fakepve.VM{VMID: vmid, Node: "pve1", Config: cfg}))
}

func (b *fakeBackend) Inspect(t *testing.T, name string) (*provider.Marks, bool) {
	vmid, ok := b.vmidByName(name)
	if !ok {
		return nil, false
	}
	vm, _ := b.env.fake.VM(vmid)
	d := configValue(vm, "description")
	if d == "" {
		return nil, true
	}
	m := marksFromDescription(d)
	return &m, true
}

func (b *fakeBackend) Stop(t *testing.T, id string) {
	vmid, _, err := parseID(id)
	must(t, err)
	b.env.fake.SetVMRunning(vmid, "")
}

func configValue(vm fakepve.VMState, key string) string {
	for _, kv := range vm.Config {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// pveAnswer is e as pve-http-server writes it: the message's first line as
// the reason phrase, {"data":null,"message":...} as the body.
func pveAnswer(req *http.Request, e *fakepve.Error) *http.Response {
	body, _ := json.Marshal(map[string]any{"data": nil, "message": e.Message})
	return &http.Response{StatusCode: e.Status, Status: fmt.Sprintf("%d %s", e.Status, e.Reason()), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json;charset=UTF-8"}}, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req}
}
