package gcp

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// requestIndex is the position of the first request matching method and
// pattern in the fake's log, -1 when there is none.
func requestIndex(env *gcptest.Env, method, pattern string, from int) int {
	reqs := env.Fake.Requests()
	for i := from; i < len(reqs); i++ {
		if matches(reqs[i].Method, reqs[i].Path, method, pattern) {
			return i
		}
	}
	return -1
}

// matches is the fake's pattern rule for one segment wildcards.
func matches(gotMethod, gotPath, method, pattern string) bool {
	p := strings.Split(strings.Trim(pattern, "/"), "/")
	g := strings.Split(strings.Trim(strings.TrimPrefix(gotPath, "/compute/v1/"), "/"), "/")
	if gotMethod != method || len(p) != len(g) {
		return false
	}
	for i := range p {
		if p[i] != "*" && p[i] != g[i] {
			return false
		}
	}
	return true
}

// checkRule proves the rule of req admits exactly ranges to req's port on
// the instance's own tag, carries the marks, and that the instance carries
// that tag.
func checkRule(t *testing.T, env *gcptest.Env, req provider.CreateRequest, ranges []string) {
	t.Helper()
	fw := env.Fake.Firewall(testProject, req.Name)
	if fw == nil {
		t.Fatalf("no firewall rule %s", req.Name)
	}
	tag := instanceTag(DefaultNetworkTagPrefix, req.Name)
	m := parseRuleMarks(fw)
	switch {
	case !sameSet(fw.GetSourceRanges(), ranges):
		t.Errorf("rule admits %v, want %v", fw.GetSourceRanges(), ranges)
	case len(fw.GetAllowed()) != 1 || fw.GetAllowed()[0].GetIPProtocol() != "tcp" || !slices.Equal(fw.GetAllowed()[0].GetPorts(), []string{"3128"}):
		t.Errorf("rule allows %v, want tcp:3128", fw.GetAllowed())
	case !slices.Equal(fw.GetTargetTags(), []string{tag}):
		t.Errorf("rule targets %v, want [%s]", fw.GetTargetTags(), tag)
	case fw.GetDirection() != "INGRESS" || fw.GetDisabled():
		t.Errorf("rule direction %s disabled %t", fw.GetDirection(), fw.GetDisabled())
	case !m.Managed || m.UID != req.UID || m.Installation != testInstallation || m.Zone != testZone:
		t.Errorf("rule marks %+v", m)
	}
	if in := env.Fake.Instance(testProject, testZone, req.Name); in != nil && !slices.Contains(in.GetTags().GetItems(), tag) {
		t.Errorf("instance tags %v lack the rule's target %s", in.GetTags().GetItems(), tag)
	}
}

// The firewall lifecycle: the rule is made before the instance, replaced
// when the request under the same name differs (and when edited by hand),
// a new rule comes with a new instance when the ranges change (they are
// part of the shape, so the reconciler makes a new instance), the rule goes
// after its instance, and an orphaned rule is collected.
func TestFirewallRuleLifecycle(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	sl := secondaries(p)
	req := testRequest("fw")
	inst := createRunning(t, b, req)
	checkRule(t, env, req, []string{"198.51.100.0/24"})
	ruleAt := requestIndex(env, "POST", "projects/"+testProject+"/global/firewalls", 0)
	insertAt := requestIndex(env, "POST", insertPath, 0)
	if ruleAt < 0 || insertAt < 0 || ruleAt > insertAt {
		t.Fatalf("rule inserted at request %d, instance at %d: the rule must come first", ruleAt, insertAt)
	}

	t.Run("kept in step under the same name", func(t *testing.T) {
		again := req
		again.AllowedSourceRanges = []string{"203.0.113.0/24", "198.51.100.0/24", "2001:db8::/32"}
		if _, err := b.Create(t.Context(), again); err != nil {
			t.Fatal(err)
		}
		checkRule(t, env, again, []string{"198.51.100.0/24", "203.0.113.0/24"})
		if n := env.Fake.Count("PUT", rulePath(req.Name)); n != 1 {
			t.Errorf("%d rule updates, want 1", n)
		}
		// A Create with the same request changes nothing.
		if _, err := b.Create(t.Context(), again); err != nil {
			t.Fatal(err)
		}
		if n := env.Fake.Count("PUT", rulePath(req.Name)); n != 1 {
			t.Errorf("%d rule updates after an unchanged Create, want still 1", n)
		}
	})

	t.Run("edited by hand", func(t *testing.T) {
		for _, edit := range []struct {
			what string
			do   func(fw *computepb.Firewall)
		}{
			{"a range added", func(fw *computepb.Firewall) { fw.SourceRanges = append(fw.SourceRanges, "0.0.0.0/0") }},
			{"a source tag added", func(fw *computepb.Firewall) { fw.SourceTags = []string{"anything"} }},
			{"a port added", func(fw *computepb.Firewall) { fw.Allowed[0].Ports = append(fw.Allowed[0].Ports, "22") }},
		} {
			fw := env.Fake.Firewall(testProject, req.Name)
			edit.do(fw)
			js, err := protojson.Marshal(fw)
			if err != nil {
				t.Fatal(err)
			}
			if code := human(t, env, "PUT", rulePath(req.Name), json.RawMessage(js), nil); code != 200 {
				t.Fatalf("hand edit (%s) answered %d", edit.what, code)
			}
			env.Fake.Settle()
			if _, err := b.Create(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			checkRule(t, env, req, []string{"198.51.100.0/24"})
			if tags := env.Fake.Firewall(testProject, req.Name).GetSourceTags(); len(tags) != 0 {
				t.Errorf("after %s: the rule keeps source tags %v (a patch would keep them; the update replaces the rule)", edit.what, tags)
			}
		}
	})

	t.Run("ranges changed: a new instance with its own rule", func(t *testing.T) {
		changed := req
		changed.AllowedSourceRanges = []string{"192.0.2.0/24"}
		changed.Name = provider.InstanceName(req.Namespace, req.ProxyName, req.UID, "shape-with-192.0.2.0/24")
		createRunning(t, b, changed)
		checkRule(t, env, changed, []string{"192.0.2.0/24"})
		checkRule(t, env, req, []string{"198.51.100.0/24"})
		// The reconciler deletes the superseded instance: its rule goes
		// after it, the new one stays.
		from := len(env.Fake.Requests())
		deleteAndWait(t, b, inst.ID)
		if env.Fake.Firewall(testProject, req.Name) != nil {
			t.Error("the old instance's rule is still there")
		}
		checkRule(t, env, changed, []string{"192.0.2.0/24"})
		delInst := requestIndex(env, "DELETE", instancePath(req.Name), from)
		delRule := requestIndex(env, "DELETE", rulePath(req.Name), from)
		if delInst < 0 || delRule < 0 || delRule < delInst {
			t.Errorf("instance deleted at request %d, rule at %d: the rule must go after the instance", delInst, delRule)
		}
		req = changed
		inst.ID = formatID(testZone, changed.Name)
	})

	t.Run("orphan collected", func(t *testing.T) {
		// The instance is deleted by hand; its rule stays behind.
		var op struct {
			Name string `json:"name"`
		}
		if code := human(t, env, "DELETE", instancePath(req.Name), nil, &op); code != 200 {
			t.Fatalf("hand delete answered %d", code)
		}
		env.Fake.Settle()
		list, err := sl.ListSecondary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || !list[0].InstanceGone || list[0].Instance != req.Name || list[0].Kind != kindFirewallRule || list[0].Marks.UID != req.UID {
			t.Fatalf("ListSecondary: %+v; want the rule of %s with its instance gone", list, req.Name)
		}
		if err := sl.DeleteSecondary(t.Context(), list[0].ID); err != nil {
			t.Fatal(err)
		}
		if env.Fake.Firewall(testProject, req.Name) != nil {
			t.Error("the orphaned rule is still there")
		}
	})
}

// deleteAndWait deletes id as the reconciler does: Delete, then Get until
// NotFound (calling Delete again each pass).
func deleteAndWait(t *testing.T, b provider.Provider, id string) {
	t.Helper()
	testenv.EventuallyNil(t, "instance "+id+" deleted", func() error {
		if err := b.Delete(t.Context(), id); err != nil {
			return err
		}
		_, err := b.Get(t.Context(), id)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("still there")
	})
	// The delete step deletes the rule after the instance.
	_, name, _ := parseID(id)
	waitDeleteStep(t, provider.Unwrap(b).(*Provider), name)
}

func waitDeleteStep(t *testing.T, p *Provider, name string) {
	t.Helper()
	testenv.EventuallyNil(t, "the delete step of "+name+" ending", func() error {
		if p.deleting.Running(name) {
			return errors.New("still running")
		}
		return nil
	})
}

// Empty ranges open nothing: no rule at all (the API would turn a rule
// without sources into 0.0.0.0/0), and IPv6 ranges alone open nothing on
// an IPv4 NIC. A rule of ours that is no longer wanted is deleted.
func TestEmptyRangesOpenNothing(t *testing.T) {
	for _, ranges := range [][]string{nil, {"2001:db8::/32"}} {
		t.Run(strings.Join(ranges, ","), func(t *testing.T) {
			env := gcptest.New(t)
			b := bounded(newTestProvider(t, env, nil))
			req := testRequest("closed")
			req.AllowedSourceRanges = ranges
			createRunning(t, b, req)
			if n := env.Fake.Count("POST", "projects/"+testProject+"/global/firewalls"); n != 0 {
				t.Fatalf("%d rules inserted for ranges %v, want none", n, ranges)
			}
			if env.Fake.Firewall(testProject, req.Name) != nil {
				t.Fatal("a rule exists")
			}
		})
	}
	t.Run("a rule no longer wanted", func(t *testing.T) {
		env := gcptest.New(t)
		b := bounded(newTestProvider(t, env, nil))
		req := testRequest("closing")
		createRunning(t, b, req)
		req.AllowedSourceRanges = nil
		if _, err := b.Create(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		env.Fake.Settle()
		if env.Fake.Firewall(testProject, req.Name) != nil {
			t.Fatal("the rule of a Proxy that admits nothing is still there")
		}
	})
}

// With manageFirewall off the provider makes no rule (the team targets
// the shared tag itself), and still tags every instance with it.
func TestFirewallManagementOff(t *testing.T) {
	env := gcptest.New(t)
	off := false
	b := bounded(newTestProvider(t, env, func(c *Config) { c.ManageFirewall = &off }))
	req := testRequest("team-rules")
	createRunning(t, b, req)
	if n := env.Fake.Count("", "projects/"+testProject+"/global/firewalls/**") + env.Fake.Count("POST", "projects/"+testProject+"/global/firewalls"); n != 0 {
		t.Errorf("%d firewall calls with management off", n)
	}
	if tags := env.Fake.Instance(testProject, testZone, req.Name).GetTags().GetItems(); !slices.Contains(tags, DefaultNetworkTagPrefix) {
		t.Errorf("instance tags %v lack the shared tag %s", tags, DefaultNetworkTagPrefix)
	}
}

// A rule under the instance's name that is not this installation's is
// refused (Permanent) and left as it is, like an instance.
func TestForeignRuleIsRefusedAndLeftAlone(t *testing.T) {
	env, p, b := newBoundedTestProvider(t)
	req := testRequest("foreign-rule")
	foreign := &computepb.Firewall{
		Name: proto.String(req.Name), Description: proto.String("someone else's"),
		Allowed:      []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"22"}}},
		SourceRanges: []string{"192.0.2.1/32"},
	}
	if err := env.Fake.PutFirewall(testProject, foreign); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	waitStep(t, p, req.Name)
	_, err := b.Get(t.Context(), formatID(testZone, req.Name))
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "not this operator installation's") {
		t.Fatalf("Get: %v; want Permanent naming the foreign rule", err)
	}
	if fw := env.Fake.Firewall(testProject, req.Name); fw.GetDescription() != "someone else's" || !slices.Equal(fw.GetSourceRanges(), []string{"192.0.2.1/32"}) {
		t.Errorf("the foreign rule was changed: %v", fw)
	}
	if env.Fake.Instance(testProject, testZone, req.Name) != nil {
		t.Error("an instance was made beside a foreign rule")
	}
}
