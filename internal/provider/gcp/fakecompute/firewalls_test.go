package fakecompute_test

import (
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

func (e *env) insertRule(fw *computepb.Firewall) error {
	op, err := e.fw.Insert(e.ctx, &computepb.InsertFirewallRequest{Project: project, FirewallResource: fw})
	if err != nil {
		return err
	}
	return op.Wait(e.ctx)
}

func (e *env) getRule(name string) (*computepb.Firewall, error) {
	return e.fw.Get(e.ctx, &computepb.GetFirewallRequest{Project: project, Firewall: name})
}

func (e *env) listRules(filter string) []string {
	e.t.Helper()
	req := &computepb.ListFirewallsRequest{Project: project}
	req.Filter, _ = listParams(filter, 0)
	var names []string
	eachItem(e.t, fmt.Sprintf("list %q", filter), e.fw.List(e.ctx, req).Next, func(fw *computepb.Firewall) {
		names = append(names, fw.GetName())
	})
	return names
}

// The firewall lifecycle a provider runs: insert, get, patch the ranges,
// list by name, delete, with global operations polled to DONE.
func TestFirewallLifecycle(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(1)
	if err := e.insertRule(rule("egress-a-3128")); err != nil {
		t.Fatal(err)
	}
	fw, err := e.getRule("egress-a-3128")
	if err != nil {
		t.Fatal(err)
	}
	if fw.GetKind() != "compute#firewall" || fw.GetId() == 0 || fw.GetPriority() != 1000 || fw.GetDisabled() ||
		fw.GetNetwork() != "https://www.googleapis.com/compute/v1/projects/proj-1/global/networks/default" ||
		fw.GetSelfLink() != "https://www.googleapis.com/compute/v1/projects/proj-1/global/firewalls/egress-a-3128" ||
		fw.GetAllowed()[0].GetIPProtocol() != "tcp" || fw.GetAllowed()[0].GetPorts()[0] != "3128" ||
		strings.Join(fw.GetSourceRanges(), ",") != "10.0.0.0/8" || fw.GetTargetTags()[0] != "egress-proxy-6f1c2a" {
		t.Fatalf("rule %v", fw)
	}
	err = e.insertRule(rule("egress-a-3128"))
	wantAPIError(t, err, 409, "alreadyExists", "The resource 'projects/proj-1/global/firewalls/egress-a-3128' already exists")

	// Patch: only what the body has changes.
	op, err := e.fw.Patch(e.ctx, &computepb.PatchFirewallRequest{Project: project, Firewall: "egress-a-3128",
		FirewallResource: &computepb.Firewall{SourceRanges: []string{"192.0.2.0/24", "198.51.100.7/32"}}})
	if err != nil {
		t.Fatal(err)
	}
	if op.Proto().GetOperationType() != "patch" || op.Proto().GetZone() != "" ||
		!strings.Contains(op.Proto().GetSelfLink(), "/global/operations/") {
		t.Fatalf("patch operation %v", op.Proto())
	}
	if err := op.Wait(e.ctx); err != nil {
		t.Fatal(err)
	}
	fw, _ = e.getRule("egress-a-3128")
	if strings.Join(fw.GetSourceRanges(), ",") != "192.0.2.0/24,198.51.100.7/32" || fw.GetAllowed()[0].GetPorts()[0] != "3128" ||
		fw.GetTargetTags()[0] != "egress-proxy-6f1c2a" {
		t.Fatalf("after patch %v", fw)
	}
	// Update (PUT) replaces the whole rule.
	repl := rule("egress-a-3128")
	repl.TargetTags = nil
	repl.Allowed[0].Ports = []string{"8080-8081"}
	uop, err := e.fw.Update(e.ctx, &computepb.UpdateFirewallRequest{Project: project, Firewall: "egress-a-3128", FirewallResource: repl})
	if err != nil || uop.Proto().GetOperationType() != "update" {
		t.Fatalf("update: %v", err)
	}
	if err := uop.Wait(e.ctx); err != nil {
		t.Fatal(err)
	}
	fw, _ = e.getRule("egress-a-3128")
	if fw.GetAllowed()[0].GetPorts()[0] != "8080-8081" || len(fw.GetTargetTags()) != 0 || strings.Join(fw.GetSourceRanges(), ",") != "10.0.0.0/8" {
		t.Fatalf("after update %v", fw)
	}
	if err := e.insertRule(rule("egress-b-3128")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.listRules(`name eq "egress-a-.*"`), " "); got != "egress-a-3128" {
		t.Fatalf("list by name: %q", got)
	}
	if got := strings.Join(e.listRules(""), " "); got != "egress-a-3128 egress-b-3128" {
		t.Fatalf("list: %q", got)
	}

	e.fake.SetOperationPolls(2)
	del, err := e.fw.Delete(e.ctx, &computepb.DeleteFirewallRequest{Project: project, Firewall: "egress-a-3128"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.fw.Delete(e.ctx, &computepb.DeleteFirewallRequest{Project: project, Firewall: "egress-a-3128"})
	wantAPIError(t, err, 400, "resourceNotReady", "The resource 'projects/proj-1/global/firewalls/egress-a-3128' is not ready")
	got, err := e.gop.Wait(e.ctx, &computepb.WaitGlobalOperationRequest{Project: project, Operation: del.Name()})
	if err != nil || got.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("globalOperations.wait: %v %v", got.GetStatus(), err)
	}
	_, err = e.getRule("egress-a-3128")
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/proj-1/global/firewalls/egress-a-3128' was not found")
	if g, err := e.gop.Get(e.ctx, &computepb.GetGlobalOperationRequest{Project: project, Operation: del.Name()}); err != nil ||
		g.GetOperationType() != "delete" || g.GetStatus() != computepb.Operation_DONE {
		t.Fatalf("globalOperations.get: %v %v", g, err)
	}
}

// An INGRESS rule that names no source is open to the world, as the API
// fills it in: the fake shows a provider what "empty ranges" would do.
func TestFirewallWithoutSourcesIsOpenToAll(t *testing.T) {
	e := newEnv(t)
	e.fake.SetOperationPolls(0)
	r := rule("egress-a-3128")
	r.SourceRanges = nil
	if err := e.insertRule(r); err != nil {
		t.Fatal(err)
	}
	fw, _ := e.getRule("egress-a-3128")
	if strings.Join(fw.GetSourceRanges(), ",") != "0.0.0.0/0" {
		t.Fatalf("sourceRanges %v, want the API's 0.0.0.0/0", fw.GetSourceRanges())
	}
	tagged := rule("egress-b-3128")
	tagged.SourceRanges, tagged.SourceTags = nil, []string{"clients"}
	if err := e.insertRule(tagged); err != nil {
		t.Fatal(err)
	}
	if fw, _ := e.getRule("egress-b-3128"); len(fw.GetSourceRanges()) != 0 {
		t.Fatalf("a rule with source tags got ranges %v", fw.GetSourceRanges())
	}
}

// The fake refuses bad rules the way the API does.
func TestFirewallValidation(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		mutate func(*computepb.Firewall)
		code   int
		reason string
		msg    string
	}{
		{"no name", func(f *computepb.Firewall) { f.Name = nil }, 400, "required", "Required field 'resource.name' not specified"},
		{"bad name", func(f *computepb.Firewall) { f.Name = proto.String("Allow_3128") }, 400, "invalid", "Invalid value for field 'resource.name': 'Allow_3128'"},
		{"unknown network", func(f *computepb.Firewall) { f.Network = proto.String("global/networks/prod") }, 404, "notFound",
			"The resource 'projects/proj-1/global/networks/prod' was not found"},
		{"bad range", func(f *computepb.Firewall) { f.SourceRanges = []string{"10.0.0.0/33"} }, 400, "invalid",
			"Invalid value for field 'resource.sourceRanges[0]': '10.0.0.0/33'"},
		{"no protocol", func(f *computepb.Firewall) { f.Allowed[0].IPProtocol = nil }, 400, "required", "'resource.allowed[0].IPProtocol'"},
		{"bad protocol", func(f *computepb.Firewall) { f.Allowed[0].IPProtocol = proto.String("http") }, 400, "invalid", "'resource.allowed[0].IPProtocol': 'http'"},
		{"bad port", func(f *computepb.Firewall) { f.Allowed[0].Ports = []string{"70000"} }, 400, "invalid", "'resource.allowed[0].ports[0]': '70000'"},
		{"ports on icmp", func(f *computepb.Firewall) {
			f.Allowed[0].IPProtocol = proto.String("icmp")
		}, 400, "invalid", "'resource.allowed[0].ports[0]': '3128'"},
		{"neither allowed nor denied", func(f *computepb.Firewall) { f.Allowed = nil }, 400, "invalid", "Invalid value for field 'resource'"},
		{"bad target tag", func(f *computepb.Firewall) { f.TargetTags = []string{"Proxy"} }, 400, "invalid", "'resource.targetTags[0]': 'Proxy'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rule("egress-a-3128")
			c.mutate(r)
			_, err := e.fw.Insert(e.ctx, &computepb.InsertFirewallRequest{Project: project, FirewallResource: r})
			wantAPIError(t, err, c.code, c.reason, c.msg)
		})
	}
	if names := e.listRules(""); len(names) != 0 {
		t.Fatalf("refused inserts left rules %v", names)
	}
	_, err := e.fw.Patch(e.ctx, &computepb.PatchFirewallRequest{Project: project, Firewall: "missing",
		FirewallResource: &computepb.Firewall{SourceRanges: []string{"10.0.0.0/8"}}})
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/proj-1/global/firewalls/missing' was not found")
}

// regions.get carries the regional quotas with usage from the instances;
// projects.get the project's.
func TestRegionAndProjectQuotas(t *testing.T) {
	e := newEnv(t)
	seedFleet(t, e)
	e.fake.SetRegionQuota(region, "CPUS", 12)
	reg, err := e.rc.Get(e.ctx, &computepb.GetRegionRequest{Project: project, Region: region})
	if err != nil {
		t.Fatal(err)
	}
	q := map[string][2]float64{}
	for _, quota := range reg.GetQuotas() {
		q[quota.GetMetric()] = [2]float64{quota.GetLimit(), quota.GetUsage()}
	}
	// us-central1 has egress-a..d and someone-else: 5 e2-small (2 vCPUs), 5 external addresses.
	if q["CPUS"] != [2]float64{12, 10} || q["INSTANCES"] != [2]float64{24, 5} || q["IN_USE_ADDRESSES"] != [2]float64{8, 5} {
		t.Fatalf("quotas %v", q)
	}
	if reg.GetKind() != "compute#region" || reg.GetStatus() != "UP" || len(reg.GetZones()) != 4 ||
		reg.GetCreationTimestamp() != "1969-12-31T16:00:00.000-08:00" {
		t.Fatalf("region %v", reg)
	}
	_, err = e.rc.Get(e.ctx, &computepb.GetRegionRequest{Project: project, Region: "mars-north1"})
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/proj-1/regions/mars-north1' was not found")

	pr, err := e.pc.Get(e.ctx, &computepb.GetProjectRequest{Project: project})
	if err != nil {
		t.Fatal(err)
	}
	pq := map[string][2]float64{}
	for _, quota := range pr.GetQuotas() {
		pq[quota.GetMetric()] = [2]float64{quota.GetLimit(), quota.GetUsage()}
	}
	if pr.GetName() != project || pr.GetId() == 0 || pq["CPUS_ALL_REGIONS"][1] != 12 || pq["FIREWALLS"][0] == 0 {
		t.Fatalf("project %v, quotas %v", pr, pq)
	}
	_, err = e.pc.Get(e.ctx, &computepb.GetProjectRequest{Project: "nope"})
	wantAPIError(t, err, 404, "notFound", "The resource 'projects/nope' was not found")
}
