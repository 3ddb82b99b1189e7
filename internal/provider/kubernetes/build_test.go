package kubernetes

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

func pureProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := newWithConfig("pods-eu", cfg, provider.Options{InstallationID: "inst-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func baseRequest() provider.CreateRequest {
	return provider.CreateRequest{
		Name: "proxy-team-a-web-0123456789", Namespace: "team-a", ProxyName: "web", UID: "uid-1",
		Port: 3128, AllowedSourceRanges: []string{"10.1.0.0/16"},
	}
}

func TestSquidConf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sp      squidParams
		want    []string
		notWant []string
	}{
		{"ranges admitted, deny last",
			squidParams{Port: 3128, Ranges: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::/8")}, PidFile: "/p", CoredumpDir: "/c"},
			[]string{"http_port 3128\n", "acl allowed_clients src 10.1.0.0/16\n", "acl allowed_clients src fd00::/8\n",
				"http_access allow allowed_clients\nhttp_access deny all\n", "http_access deny to_localhost\n",
				"http_access deny to_link_local\n", "pid_filename /p\n", "coredump_dir /c\n"},
			[]string{"http_access allow all\n", "127.0.0.1/32", "cache_effective_user"}},
		{"empty ranges admit loopback only",
			squidParams{Port: 8080, PidFile: "/p", CoredumpDir: "/c"},
			[]string{"http_port 8080\n", "acl allowed_clients src 127.0.0.1/32\n", "acl allowed_clients src ::1/128\n"},
			[]string{"http_access allow all\n", "0.0.0.0/0"}},
		{"loopback test adaptation",
			squidParams{ListenAddr: "127.0.0.1", Port: 3999, PidFile: "/p", CoredumpDir: "/c", EffectiveUser: "proxy", AllowToLocalhost: true},
			[]string{"http_port 127.0.0.1:3999\n", "cache_effective_user proxy\n"},
			[]string{"deny to_localhost", "http_access allow all\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := squidConf(tc.sp)
			for _, w := range tc.want {
				if !strings.Contains(conf, w) {
					t.Errorf("squid.conf lacks %q:\n%s", w, conf)
				}
			}
			for _, nw := range tc.notWant {
				if strings.Contains(conf, nw) {
					t.Errorf("squid.conf contains %q:\n%s", nw, conf)
				}
			}
			// Deny by default: the last http_access rule is "deny all".
			var last string
			for _, l := range strings.Split(conf, "\n") {
				if strings.HasPrefix(l, "http_access ") {
					last = l
				}
			}
			if last != "http_access deny all" {
				t.Errorf("last http_access rule is %q, want \"http_access deny all\"", last)
			}
		})
	}
}

func TestResolveRejects(t *testing.T) {
	cfg := Config{MachineTypes: map[string]MachineType{"small": {CPU: "50m", Memory: "64Mi"}}}
	p := pureProvider(t, cfg)
	for _, tc := range []struct {
		name   string
		mutate func(*provider.CreateRequest)
		want   string
	}{
		{"empty name", func(r *provider.CreateRequest) { r.Name = "" }, "name is empty"},
		{"bad name", func(r *provider.CreateRequest) { r.Name = "Bad_Name" }, "name"},
		{"port", func(r *provider.CreateRequest) { r.Port = 0 }, "port 0"},
		{"range", func(r *provider.CreateRequest) { r.AllowedSourceRanges = []string{"10.0.0.1"} }, "not a CIDR"},
		{"machine type", func(r *provider.CreateRequest) { r.Placement.MachineType = "huge" }, `"huge" is not in`},
		{"image", func(r *provider.CreateRequest) { r.Placement.Image = "evil:1" }, "placement.image"},
		{"zone", func(r *provider.CreateRequest) { r.Placement.Zone = "not a label" }, "placement.zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := baseRequest()
			tc.mutate(&req)
			_, err := p.resolve(req)
			if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("resolve: %v, want Permanent mentioning %q", err, tc.want)
			}
		})
	}
}

func TestBuildObjects(t *testing.T) {
	p := pureProvider(t, Config{MachineTypes: map[string]MachineType{"small": {CPU: "50m", Memory: "64Mi"}}})
	req := baseRequest()
	req.Placement = provider.Placement{Zone: "eu-1a", Region: "eu-1", MachineType: "small"}
	s, err := p.resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	pod, svc, cm := p.buildPod(s), p.buildService(s), p.buildConfigMap(s)
	for _, m := range []metav1.ObjectMeta{pod.ObjectMeta, svc.ObjectMeta, cm.ObjectMeta} {
		if m.Name != req.Name || m.Namespace != "team-a" {
			t.Errorf("object %s/%s, want team-a/%s", m.Namespace, m.Name, req.Name)
		}
		if got := provider.MarksFromLabels(m.Labels); got != (provider.Marks{Managed: true, UID: "uid-1", Installation: "inst-1"}) {
			t.Errorf("%s marks %+v", m.Name, got)
		}
		if len(m.OwnerReferences) != 1 {
			t.Errorf("%s owner references %+v, want the Proxy", m.Name, m.OwnerReferences)
		}
	}
	c := pod.Spec.Containers[0]
	if got := c.Resources.Limits.Cpu().String() + "/" + c.Resources.Limits.Memory().String(); got != "50m/64Mi" {
		t.Errorf("limits %s, want the machine type's 50m/64Mi", got)
	}
	if !c.Resources.Requests.Cpu().Equal(*c.Resources.Limits.Cpu()) {
		t.Errorf("requests %v differ from limits %v", c.Resources.Requests, c.Resources.Limits)
	}
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 ||
		terms[0].MatchExpressions[0].Key != corev1.LabelTopologyZone || terms[0].MatchExpressions[0].Values[0] != "eu-1a" ||
		terms[0].MatchExpressions[1].Key != corev1.LabelTopologyRegion || terms[0].MatchExpressions[1].Values[0] != "eu-1" {
		t.Errorf("node affinity %+v, want zone eu-1a and region eu-1", terms)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.TCPSocket == nil || c.ReadinessProbe.TCPSocket.Port.IntVal != 3128 {
		t.Errorf("readiness probe %+v, want TCP on 3128", c.ReadinessProbe)
	}
	if svc.Spec.Selector[labelInstance] != req.Name || svc.Spec.Ports[0].Port != 3128 {
		t.Errorf("service selector %v ports %+v", svc.Spec.Selector, svc.Spec.Ports)
	}
	if !strings.Contains(cm.Data[confFile], "acl allowed_clients src 10.1.0.0/16") {
		t.Errorf("configmap squid.conf:\n%s", cm.Data[confFile])
	}

	// Without placement: no affinity, the entry's resources.
	s.req.Placement, s.size = provider.Placement{}, p.cfg.Resources
	if pod := p.buildPod(s); pod.Spec.Affinity != nil || pod.Spec.Containers[0].Resources.Limits.Memory().String() != DefaultMemory {
		t.Errorf("pod without placement: affinity %+v, resources %+v", pod.Spec.Affinity, pod.Spec.Containers[0].Resources)
	}
}

func TestStateOf(t *testing.T) {
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	notReady := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	now := metav1.Now()
	for _, tc := range []struct {
		name     string
		phase    corev1.PodPhase
		ip       string
		conds    []corev1.PodCondition
		deleting bool
		want     provider.State
	}{
		{"no phase", "", "", nil, false, provider.StateProvisioning},
		{"pending", corev1.PodPending, "", nil, false, provider.StateProvisioning},
		{"running ready", corev1.PodRunning, "10.0.0.1", ready, false, provider.StateRunning},
		{"running not ready", corev1.PodRunning, "10.0.0.1", notReady, false, provider.StateProvisioning},
		{"running no condition", corev1.PodRunning, "10.0.0.1", nil, false, provider.StateProvisioning},
		{"running ready no ip", corev1.PodRunning, "", ready, false, provider.StateProvisioning},
		{"running ready deleting", corev1.PodRunning, "10.0.0.1", ready, true, provider.StateTerminated},
		{"pending deleting", corev1.PodPending, "", nil, true, provider.StateTerminated},
		{"succeeded", corev1.PodSucceeded, "", nil, false, provider.StateTerminated},
		{"failed", corev1.PodFailed, "10.0.0.1", nil, false, provider.StateTerminated},
		{"unknown", corev1.PodUnknown, "", nil, false, provider.StateTerminated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns"},
				Status: corev1.PodStatus{Phase: tc.phase, PodIP: tc.ip, Conditions: tc.conds}}
			if tc.deleting {
				pod.DeletionTimestamp = &now
			}
			inst := instanceOf(pod)
			if inst.State != tc.want {
				t.Errorf("state %q, want %q", inst.State, tc.want)
			}
			if (inst.IP != "") != (tc.want == provider.StateRunning) {
				t.Errorf("IP %q with state %q: IP only when Running", inst.IP, inst.State)
			}
		})
	}
}

func TestParseID(t *testing.T) {
	for id, ok := range map[string]bool{
		"ns/proxy-a": true, "/proxy-a": false, "ns/": false, "ns": false, "": false,
		"ns/a/b": false, "NS/proxy": false, "ns/1abc": false,
	} {
		_, _, err := parseID(id)
		if (err == nil) != ok || (err != nil && !errors.Is(err, provider.ErrPermanent)) {
			t.Errorf("parseID(%q): %v, want ok=%v (Permanent otherwise)", id, err, ok)
		}
	}
}

func TestParseConfig(t *testing.T) {
	cfg, errs := Parse([]byte(`{"namespace":"proxies","machineTypes":{"small":{"cpu":"50m","memory":"64Mi"}},"runAsUser":1000}`), nil)
	if len(errs) > 0 || cfg.Namespace != "proxies" || *cfg.RunAsUser != 1000 || cfg.Image != DefaultImage {
		t.Errorf("Parse: %+v, %v", cfg, errs)
	}
	for raw, want := range map[string]string{
		`{"imagee":"x"}`:  "imagee",
		`{"runAsUser":0}`: "runAsUser",
		`{"machineTypes":{"small":{"cpu":"lots"}}}`:    "machineTypes[small].cpu",
		`{"resources":{"memory":"-1Mi"}}`:              "resources.memory",
		`{"namespace":"Not_A_Namespace"}`:              "namespace",
		`{"machineTypes":{"small":{"memory":"64Mi"}}}`: "machineTypes[small].cpu",
	} {
		_, errs := Parse([]byte(raw), nil)
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), want) {
			t.Errorf("Parse(%s): %v, want an error naming %s", raw, errs, want)
		}
	}
}
