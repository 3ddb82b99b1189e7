package providertest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/fake"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/providertest"
)

// A suite that cannot fail proves nothing. Each mutant below is the fake
// with one contract rule broken, most of them the way a real provider broke
// it (the known gaps of the earlier providers), and names the case that must catch it. Every case is
// caught by at least one mutant.
var mutants = []struct {
	mode, catchIn string
}{
	{"not-idempotent", "CreateIsIdempotentByName"},
	{"refuses-empty-uid", "AdoptsOwnInstance/empty_UID"},
	{"leaves-empty-uid", "AdoptionFillsEmptyUIDMark"}, // kubernetes before issue 7
	{"keeps-stopped", "AdoptingStoppedStartsIt"},
	{"adopts-other-uid", "RefusesOtherUID"}, // kubernetes, gcp, kvm
	{"adopts-unmarked", "RefusesUnmarked"},
	{"lists-every-installation", "IgnoresOtherInstallation"}, // every provider before installations
	{"get-sees-unmarked", "LostMarkIsNotOurs/unmarked"},
	{"delete-deletes-foreign", "LostMarkIsNotOurs"},
	{"get-missing-is-transient", "GetMissingIsNotFound"},
	{"delete-missing-fails", "DeleteMissingSucceeds"},
	{"delete-is-noop", "DeleteLeavesNothing"},
	{"lists-zero-created-at", "ListByTagReturnsMarkedOnly"}, // gcp and kvm2 on a parse error
	{"panics-on-garbage", "IDsRoundTrip"},
	{"never-runs", "GetReachesRunning"},                                      // gcp without a NAT IP
	{"hardcoded-name", "ErrorsCarryConfiguredName"},                          // kubernetes
	{"quota-is-permanent", "ErrorsCarryConfiguredName/create/QuotaExceeded"}, // kubernetes
	{"ignores-cancelled-ctx", "CancelledContextEndsEveryCall/already_cancelled"},
	{"logs-cloud-init", "CloudInitNeverLeaks"},
	// The same leak through each global logger a provider could reach for
	// instead of its ctx's.
	{"logs-cloud-init-ctrl-log", "CloudInitNeverLeaks"},
	{"logs-cloud-init-klog", "CloudInitNeverLeaks"},
	{"logs-cloud-init-std-log", "CloudInitNeverLeaks"},
	{"logs-cloud-init-slog", "CloudInitNeverLeaks"},
	{"logs-users", "ClientAuthNeverLeaks"},
	// Secondary resources (suite_secondary_test.go).
	{"secondary-live-as-orphan", "SecondaryWithoutInstanceIsCollectable"},
	{"secondary-never-listed", "SecondaryWithoutInstanceIsCollectable"},
	{"secondary-lists-every-installation", "SecondaryWithoutInstanceIsCollectable"},
	{"secondary-delete-is-noop", "SecondaryWithoutInstanceIsCollectable"},
	{"claims-to-move", "EgressAddressKeptAcrossInstances"},
	{"ignores-static-address", "StaticAddressIsTheInstanceAddress"}, // a VM provider's seed without the network-config
}

const mutantEnv = "PROVIDERTEST_MUTANT"

// TestSuiteCatchesMutants runs each mutant's case in a child test process
// (a failing subtest cannot be expected in-process) and wants it to fail
// there by name, without crashing; a control run of the whole suite on the
// unbroken fake must pass.
func TestSuiteCatchesMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("inside a child run")
	}
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	caught := map[string]bool{}
	for _, m := range mutants {
		caught[strings.SplitN(m.catchIn, "/", 2)[0]] = true
	}
	for _, name := range providertest.CaseNames() {
		if !caught[name] {
			t.Errorf("no mutant proves that case %s can fail", name)
		}
	}

	t.Run("control", func(t *testing.T) {
		out, err := runChild(t, "none", "")
		if err != nil {
			t.Fatalf("the suite fails on the unbroken fake: %v\n%s", err, out)
		}
	})
	for _, m := range mutants {
		t.Run(m.mode, func(t *testing.T) {
			out, err := runChild(t, m.mode, m.catchIn)
			want := "--- FAIL: TestMutant/" + m.mode + "/" + m.catchIn
			switch {
			case err == nil:
				t.Errorf("case %s passed against mutant %s\n%s", m.catchIn, m.mode, out)
			case !strings.Contains(out, want):
				t.Errorf("child run failed, but not with %q\n%s", want, out)
			case strings.Contains(out, "panic:"):
				t.Errorf("the child run crashed instead of failing the case\n%s", out)
			}
		})
	}
}

// runChild runs TestMutant for mode in a child process, limited to the
// case path catchIn (all cases when empty).
func runChild(t *testing.T, mode, catchIn string) (string, error) {
	t.Helper()
	pattern := "^TestMutant$/^" + regexp.QuoteMeta(mode) + "$"
	for _, part := range strings.Split(catchIn, "/") {
		if part != "" {
			pattern += "/^" + regexp.QuoteMeta(part) + "$"
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), mutantEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMutant is the child side: the suite against the mutant the parent
// named.
func TestMutant(t *testing.T) {
	mode := os.Getenv(mutantEnv)
	if mode == "" {
		t.Skip("only run by TestSuiteCatchesMutants")
	}
	t.Run(mode, func(t *testing.T) {
		providertest.Run(t, providertest.Harness{
			Name: "mutant",
			New: func(_ *testing.T, installation string) (provider.Provider, providertest.Backend) {
				return newMutantWorld(mode, installation) // async_test.go: with holds and restarts
			},
			Request: func(_ *testing.T, proxyName, uid string) provider.CreateRequest {
				return provider.CreateRequest{ProxyName: proxyName, UID: uid, Port: 3128}
			},
			StaticAddress: providertest.DocumentationStaticAddress(),
			// Mutants that never converge should fail fast.
			PollTimeout: time.Second,
		})
	})
}

// hook drives the fake's backend for the suite.
type hook struct{ p *fake.Provider }

func (h hook) Vanish(_ *testing.T, id string) { h.p.Remove(strings.TrimPrefix(id, "fake/")) }
func (h hook) Plant(_ *testing.T, name string, marks *provider.Marks) {
	h.p.Backend().Plant(name, marks)
}
func (h hook) FailNext(_ *testing.T, op string, class error) { h.p.FailNext(op, class) }
func (h hook) Block(_ *testing.T, op string) func()          { return h.p.Block(op) }
func (h hook) Stop(_ *testing.T, id string) {
	h.p.SetState(strings.TrimPrefix(id, "fake/"), provider.StateStopped)
}

// mutant is the fake with the rule its mode names broken.
type mutant struct {
	*fake.Provider
	mode         string
	installation string
}

func (m *mutant) ctx(ctx context.Context) context.Context {
	if m.mode == "ignores-cancelled-ctx" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// post breaks errors the way some providers mislabel them.
func (m *mutant) post(err error) error {
	var pe *provider.Error
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	cp := *pe
	switch {
	case m.mode == "hardcoded-name":
		cp.Provider = "kubernetes"
	case m.mode == "quota-is-permanent" && errors.Is(err, provider.ErrQuotaExceeded):
		cp.Class = provider.ErrPermanent
		cp.Err = errors.New("quota 403")
	case m.mode == "get-missing-is-transient" && pe.Op == provider.OpGet && errors.Is(err, provider.ErrNotFound):
		cp.Class = provider.ErrTransient
		cp.Err = errors.New("lookup failed")
	default:
		return err
	}
	return &cp
}

func (m *mutant) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	found, exists := m.Backend().Lookup(req.Name)
	switch m.mode {
	case "not-idempotent":
		req.Name = fmt.Sprintf("%.50s-%d", req.Name, m.Calls(provider.OpCreate))
	case "refuses-empty-uid":
		if exists && found.Marks != nil && found.Marks.UID == "" {
			return provider.Instance{}, provider.Wrap(m.Name(), provider.OpCreate, provider.ErrPermanent, errors.New("no UID"))
		}
	case "adopts-other-uid":
		if exists && found.Marks != nil && found.Marks.UID != "" {
			req.UID = found.Marks.UID
		}
	case "adopts-unmarked":
		if exists && (found.Marks == nil || !found.Marks.Managed) {
			m.Backend().Plant(req.Name, &provider.Marks{Managed: true, UID: req.UID, Installation: m.installation})
		}
	case "leaves-empty-uid":
		// Adopts, and reports the request's UID, but leaves the backend's
		// mark empty.
		inst, err := m.Provider.Create(ctx, req)
		if exists && found.Marks != nil && found.Marks.UID == "" && err == nil {
			m.Backend().Plant(req.Name, &provider.Marks{Managed: true, Installation: m.installation})
		}
		return inst, err
	case "logs-cloud-init":
		logr.FromContextOrDiscard(ctx).V(4).Info("user-data", "cloudInit", req.CloudInit.Reveal())
	case "logs-cloud-init-ctrl-log":
		ctrllog.Log.WithName("mutant").V(4).Info("user-data", "cloudInit", req.CloudInit.Reveal())
	case "logs-cloud-init-klog":
		klog.V(4).InfoS("user-data", "cloudInit", req.CloudInit.Reveal())
	case "logs-cloud-init-std-log":
		log.Printf("user-data: %s", req.CloudInit.Reveal())
	case "logs-cloud-init-slog":
		slog.Debug("user-data", "cloudInit", req.CloudInit.Reveal())
	case "logs-users":
		logr.FromContextOrDiscard(ctx).V(4).Info("request", "clientAuth", req.ClientAuth.Reveal())
	case "ignores-static-address":
		req.StaticAddress = nil
	case "keeps-stopped":
		inst, err := m.Provider.Create(ctx, req)
		if exists && found.State == provider.StateStopped && err == nil {
			m.SetState(req.Name, provider.StateStopped)
			inst.State, inst.IP = provider.StateStopped, ""
		}
		return inst, err
	}
	inst, err := m.Provider.Create(m.ctx(ctx), req)
	return inst, m.post(err)
}

func (m *mutant) Get(ctx context.Context, id string) (provider.Instance, error) {
	switch m.mode {
	case "panics-on-garbage":
		if !strings.HasPrefix(id, "fake/proxy-") {
			panic("index out of range [1] with length 1")
		}
	case "get-sees-unmarked":
		if r, ok := m.Backend().Lookup(strings.TrimPrefix(id, "fake/")); ok {
			return provider.Instance{ID: id, State: r.State, IP: r.IP, CreatedAt: r.CreatedAt}, nil
		}
	}
	inst, err := m.Provider.Get(m.ctx(ctx), id)
	if m.mode == "never-runs" && err == nil && inst.State == provider.StateRunning {
		inst.State, inst.IP = provider.StateProvisioning, ""
	}
	return inst, m.post(err)
}

func (m *mutant) Delete(ctx context.Context, id string) error {
	name := strings.TrimPrefix(id, "fake/")
	switch m.mode {
	case "delete-missing-fails":
		if _, ok := m.Backend().Lookup(name); !ok {
			return provider.Wrap(m.Name(), provider.OpDelete, provider.ErrNotFound, errors.New("no such instance"))
		}
	case "delete-deletes-foreign":
		m.Remove(name)
		return nil
	case "delete-is-noop":
		return nil
	}
	return m.post(m.Provider.Delete(m.ctx(ctx), id))
}

func (m *mutant) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	list, err := m.Provider.ListByTag(m.ctx(ctx))
	switch m.mode {
	case "lists-every-installation":
		list = nil
		for _, r := range m.Backend().Records() {
			if r.Marks != nil && r.Marks.Managed {
				list = append(list, provider.Instance{ID: fake.ID(r.Name), UID: r.Marks.UID, CreatedAt: r.CreatedAt})
			}
		}
	case "lists-zero-created-at":
		for i := range list {
			list[i].CreatedAt = time.Time{}
		}
	}
	return list, m.post(err)
}

func (m *mutant) Check(ctx context.Context) provider.CheckResult {
	return m.Provider.Check(m.ctx(ctx))
}
