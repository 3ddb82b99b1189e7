package kubernetes

import (
	"context"
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
)

// The gateway label of docs/kubernetes-provider.md's worked example.
const gatewayLabel = "egress.example.com/gateway"

// Each podLabels and podAnnotations problem is one error naming the key's
// path under the entry, and a key the provider sets itself says why.
func TestParsePodMetadata(t *testing.T) {
	entry := field.NewPath("providers").Index(0).Child("kubernetes")
	for _, tc := range []struct {
		name, raw, field string
		why              string // in the error's text
	}{
		{"label key", `{"podLabels":{"bad key":"x"}}`, "podLabels[bad key]", "the key: name part must consist of"},
		{"label key prefix", `{"podLabels":{"Example.com/x":"y"}}`, "podLabels[Example.com/x]", "the key: prefix part"},
		{"label value", `{"podLabels":{"app":"not a value"}}`, "podLabels[app]", "a valid label must be"},
		{"label value length", `{"podLabels":{"app":"` + strings.Repeat("a", 64) + `"}}`, "podLabels[app]", "must be no more than 63"},
		{"service selector", `{"podLabels":{"app.kubernetes.io/instance":"x"}}`, "podLabels[app.kubernetes.io/instance]", "would change which Pods they select"},
		{"managed mark", `{"podLabels":{"proxy-operator-managed":"true"}}`, "podLabels[proxy-operator-managed]", "Service and NetworkPolicy select"},
		{"uid mark", `{"podLabels":{"proxy-operator-uid":"u"}}`, "podLabels[proxy-operator-uid]", "owning Proxy"},
		{"installation mark", `{"podLabels":{"proxy-operator-installation":"i"}}`, "podLabels[proxy-operator-installation]", "installation"},
		{"name label", `{"podLabels":{"app.kubernetes.io/name":"x"}}`, "podLabels[app.kubernetes.io/name]", "every object of an instance"},
		{"managed-by label", `{"podLabels":{"app.kubernetes.io/managed-by":"x"}}`, "podLabels[app.kubernetes.io/managed-by]", "every object of an instance"},
		{"mark family", `{"podLabels":{"proxy-operator-zone":"x"}}`, "podLabels[proxy-operator-zone]", "kept for the operator's own marks"},
		{"operator domain label", `{"podLabels":{"egress.proxy-operator.dev/x":"y"}}`, "podLabels[egress.proxy-operator.dev/x]", "kept for the operator's own marks"},
		{"annotation key", `{"podAnnotations":{"-bad":"x"}}`, "podAnnotations[-bad]", "the key: name part must consist of"},
		{"proxy annotation", `{"podAnnotations":{"egress.proxy-operator.dev/proxy":"a/b"}}`, "podAnnotations[egress.proxy-operator.dev/proxy]", "the Proxy the Pod serves"},
		{"proxy annotation in capitals", `{"podAnnotations":{"EGRESS.PROXY-OPERATOR.DEV/proxy":"a/b"}}`, "podAnnotations[EGRESS.PROXY-OPERATOR.DEV/proxy]", "the Proxy the Pod serves"},
		{"annotation size", `{"podAnnotations":{"example.com/big":"` + strings.Repeat("x", podAnnotationRoom) + `"}}`, "podAnnotations", "Too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := Parse([]byte(tc.raw), entry)
			want := entry.String() + "." + tc.field
			if len(errs) != 1 || errs[0].Field != want || !strings.Contains(errs[0].Error(), tc.why) {
				t.Errorf("Parse(%.80s): %v, want one error on %s saying %q", tc.raw, errs, want, tc.why)
			}
		})
	}

	// What the API server takes is taken: an empty label value, an
	// annotation key in capitals (the API server checks it in lower case),
	// any annotation value, annotations up to the room left beside the
	// provider's own.
	cfg, errs := Parse([]byte(`{"podLabels":{"`+gatewayLabel+`":"partner-a","app":""},`+
		`"podAnnotations":{"Example.com/Note":"free text, spaces: fine","example.com/big":"`+
		strings.Repeat("x", podAnnotationRoom-len("Example.com/Note")-len("free text, spaces: fine")-len("example.com/big"))+`"}}`), entry)
	if len(errs) > 0 || cfg.PodLabels[gatewayLabel] != "partner-a" || len(cfg.PodAnnotations) != 2 {
		t.Errorf("Parse of valid pod metadata: %+v, %v", cfg.PodLabels, errs)
	}
}

// Every label and annotation the provider puts on its objects is reserved,
// and the selectors of the Service and the NetworkPolicy select by
// reserved keys only, so no entry's key can change what they select.
func TestReservedKeysCoverMeta(t *testing.T) {
	p := pureProvider(t, Config{})
	s, err := p.resolve(baseRequest())
	if err != nil {
		t.Fatal(err)
	}
	m := p.meta(s)
	if len(m.Annotations) == 0 {
		t.Fatal("the request names a Proxy: meta should carry its annotation")
	}
	for k := range m.Labels {
		if reservedKey(k, reservedPodLabels) == "" {
			t.Errorf("the provider sets label %q, which an entry's podLabels may set too", k)
		}
	}
	for k := range m.Annotations {
		if reservedKey(k, reservedPodAnnotations) == "" {
			t.Errorf("the provider sets annotation %q, which an entry's podAnnotations may set too", k)
		}
	}
	selectors := map[string]map[string]string{
		"service": p.buildService(s).Spec.Selector, "networkpolicy": p.buildNetworkPolicy(s).Spec.PodSelector.MatchLabels,
	}
	for kind, sel := range selectors {
		for k := range sel {
			if _, ok := reservedPodLabels[k]; !ok {
				t.Errorf("the %s selects by %q, which is not reserved", kind, k)
			}
		}
	}
}

// The entry's podLabels and podAnnotations reach the Pod and nothing else:
// the Service, ConfigMap, NetworkPolicy and users' Secret are what an entry
// without them makes, selectors included, and the Pod's spec is unchanged.
func TestBuildPodCarriesEntryMetadata(t *testing.T) {
	extraLabels := map[string]string{gatewayLabel: "partner-a", "team": "payments"}
	extraAnnotations := map[string]string{"example.com/owner": "platform"}
	plain := pureProvider(t, Config{})
	withMeta := pureProvider(t, Config{PodLabels: extraLabels, PodAnnotations: extraAnnotations})
	req := baseRequest()
	req.ClientAuth = provider.Sensitive(clientauthtest.File(t, "alice", "pw"))
	sp, err := plain.resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := withMeta.resolve(req)
	if err != nil {
		t.Fatal(err)
	}

	for kind, pair := range map[string][2]any{
		"service":       {plain.buildService(sp), withMeta.buildService(sm)},
		"configmap":     {plain.buildConfigMap(sp), withMeta.buildConfigMap(sm)},
		"networkpolicy": {plain.buildNetworkPolicy(sp), withMeta.buildNetworkPolicy(sm)},
		"secret":        {plain.buildSecret(sp), withMeta.buildSecret(sm)},
	} {
		if !equality.Semantic.DeepEqual(pair[0], pair[1]) {
			t.Errorf("the %s changed with podLabels/podAnnotations:\n%+v\nwant\n%+v", kind, pair[1], pair[0])
		}
	}

	base, pod := plain.buildPod(sp), withMeta.buildPod(sm)
	wantLabels := maps.Clone(base.Labels)
	maps.Copy(wantLabels, extraLabels)
	wantAnnotations := maps.Clone(base.Annotations)
	maps.Copy(wantAnnotations, extraAnnotations)
	if !maps.Equal(pod.Labels, wantLabels) || !maps.Equal(pod.Annotations, wantAnnotations) {
		t.Errorf("pod labels %v annotations %v, want %v and %v", pod.Labels, pod.Annotations, wantLabels, wantAnnotations)
	}
	if !equality.Semantic.DeepEqual(pod.Spec, base.Spec) {
		t.Error("the Pod's spec changed with podLabels/podAnnotations")
	}
	// The Service and the NetworkPolicy still select the Pod.
	np := withMeta.buildNetworkPolicy(sm)
	for k, v := range withMeta.buildService(sm).Spec.Selector {
		if pod.Labels[k] != v || np.Spec.PodSelector.MatchLabels[k] != v {
			t.Errorf("selector %s=%s: pod has %q, networkpolicy selects %q", k, v, pod.Labels[k], np.Spec.PodSelector.MatchLabels[k])
		}
	}
	// The entry's values never override the provider's, even where
	// validation was bypassed.
	withMeta.cfg.PodLabels = map[string]string{labelInstance: "someone-else", provider.MarkInstallation: "other"}
	withMeta.cfg.PodAnnotations = map[string]string{annotationProxy: "x/y"}
	forced := withMeta.buildPod(sm)
	if !maps.Equal(forced.Labels, base.Labels) || !maps.Equal(forced.Annotations, base.Annotations) {
		t.Errorf("an entry's value replaced the provider's: labels %v annotations %v", forced.Labels, forced.Annotations)
	}
}

// Against a real API server: the Pod Create makes carries the entry's
// labels, so a CNI policy's podSelector (here a label selector on a list)
// finds it, and only it. An existing Pod is adopted as it is: a changed
// podLabels reaches new Pods only, like a changed image.
func TestPodMetadataOnAPIServer(t *testing.T) {
	cs := adminClient(t)
	ns := newNamespace(t, "podmeta", nil)
	ctx := context.Background()
	plain := newAPIProvider(t, "podmeta", Config{Namespace: ns}, nil)
	labelled := newAPIProvider(t, "podmeta", Config{Namespace: ns,
		PodLabels: map[string]string{gatewayLabel: "partner-a"}, PodAnnotations: map[string]string{"example.com/owner": "platform"}}, nil)

	reqA := apiRequest("team", "a")
	if _, err := labelled.Create(ctx, reqA); err != nil {
		t.Fatal(err)
	}
	reqB := apiRequest("team", "b")
	if _, err := plain.Create(ctx, reqB); err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: gatewayLabel + "=partner-a"}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != reqA.Name || pods.Items[0].Annotations["example.com/owner"] != "platform" {
		t.Errorf("pods selected by %s: %d, want only %s with its annotation", sel.LabelSelector, len(pods.Items), reqA.Name)
	}
	svcs, err := cs.CoreV1().Services(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	nps, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(svcs.Items) + len(cms.Items) + len(nps.Items); n != 0 {
		t.Errorf("%d Services, ConfigMaps or NetworkPolicies carry the entry's label, want none", n)
	}

	// The labelled entry meets B's Pod, made without the label: adopted as
	// it is, not patched.
	if _, err := labelled.Create(ctx, reqB); err != nil {
		t.Fatal(err)
	}
	podB, err := cs.CoreV1().Pods(ns).Get(ctx, reqB.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := podB.Labels[gatewayLabel]; ok {
		t.Errorf("an adopted Pod was given the entry's label: %v", podB.Labels)
	}
}
