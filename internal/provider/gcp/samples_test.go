package gcp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
)

const repoRoot = "../../.."

// The shipped providers configs carry the gcp entry commented out (it
// needs a project); config/samples/proxy_gcp.yaml places a Proxy on it.
var shippedProvidersConfigs = []string{"hack/providers-dev.yaml", "config/manager/providers.yaml"}

var commentedEntryStart = regexp.MustCompile(`^(\s*)# - name: (\S+)\s*$`)

// uncommentGCPEntries returns src with its commented-out entries of type
// gcp uncommented, and their names. An entry runs from its "# - name:"
// line over every following line with the same comment prefix.
func uncommentGCPEntries(src string) (string, []string, error) {
	lines := strings.Split(src, "\n")
	var names []string
	for i := 0; i < len(lines); i++ {
		m := commentedEntryStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, prefix := m[1], m[1]+"#"
		end := i + 1
		for end < len(lines) && strings.HasPrefix(lines[end], prefix) && !commentedEntryStart.MatchString(lines[end]) {
			end++
		}
		var block []string
		isGCP := false
		for _, l := range lines[i:end] {
			rest := strings.TrimPrefix(l, prefix)
			switch {
			case strings.TrimSpace(rest) == "":
				block = append(block, "")
				continue
			case !strings.HasPrefix(rest, " "):
				return "", nil, fmt.Errorf("line %q of the commented entry %s does not uncomment", l, m[2])
			}
			u := indent + rest[1:]
			if strings.TrimSpace(u) == "type: "+Type {
				isGCP = true
			}
			block = append(block, u)
		}
		if !isGCP {
			i = end - 1
			continue
		}
		names = append(names, m[2])
		lines = append(lines[:i], append(block, lines[end:]...)...)
		i = end - 1
	}
	return strings.Join(lines, "\n"), names, nil
}

// shippedEntries parses a shipped config with its gcp entries uncommented,
// as the registry would, and returns them by name.
func shippedEntries(t *testing.T, file string) map[string]Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	text, names, err := uncommentGCPEntries(string(data))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(names) == 0 {
		t.Fatalf("%s: no commented gcp entry", file)
	}
	var top struct {
		Providers []struct {
			Type string `json:"type"`
		} `json:"providers"`
	}
	if err := yaml.Unmarshal([]byte(text), &top); err != nil {
		t.Fatalf("%s, uncommented: %v", file, err)
	}
	var types []string
	for _, e := range top.Providers {
		types = append(types, e.Type)
	}
	entries, err := config.Parse([]byte(text), types)
	if err != nil {
		t.Fatalf("%s, uncommented: %v", file, err)
	}
	out := map[string]Config{}
	for _, e := range entries {
		if e.Type != Type {
			continue
		}
		cfg, errs := Parse(e.Settings, e.SettingsPath())
		if len(errs) > 0 {
			t.Fatalf("%s, uncommented: %v", file, errs.ToAggregate())
		}
		out[e.Name] = cfg
	}
	return out
}

// Seed gap (gcp): "The sample cannot work: config/samples/proxy_gcp.yaml
// uses a debian-cloud image, which has no cloud-init, so its Squid install
// never runs." The sample's placement resolves against the shipped entry
// of both configs, to an image whose guest runs cloud-init and the
// generated cloud-config; the sample runs for real against the fake; and
// the seed's image is refused.
func TestGapTheSampleCannotWork(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "config/samples/proxy_gcp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var px v1alpha1.Proxy
	if err := yaml.UnmarshalStrict(data, &px); err != nil {
		t.Fatal(err)
	}
	req := provider.CreateRequest{
		Name: provider.InstanceName("default", px.Name, "uid-sample", "shape"), Namespace: "default", ProxyName: px.Name,
		UID: "uid-sample", Port: px.Spec.Port, AllowedSourceRanges: px.Spec.AllowedSourceRanges,
		Placement: provider.Placement{Zone: px.Spec.Placement.Zone, Region: px.Spec.Placement.Region,
			MachineType: px.Spec.Placement.MachineType, Image: px.Spec.Placement.Image},
	}
	for _, file := range shippedProvidersConfigs {
		cfg, ok := shippedEntries(t, file)[px.Spec.Provider]
		if !ok {
			t.Errorf("%s has no gcp entry %q, which the sample names", file, px.Spec.Provider)
			continue
		}
		p, err := New(testName, cfg, provider.Options{InstallationID: testInstallation})
		if err != nil {
			t.Fatal(err)
		}
		pl, err := p.resolve(req)
		if err != nil {
			t.Fatalf("the sample against %s: %v", file, err)
		}
		if _, generated, reads := imageSupport(pl.image.project); !generated || !reads || pl.image.project == "debian-cloud" {
			t.Errorf("the sample's image %s (%s) cannot run the generated cloud-config", pl.image.path, file)
		}
		if !strings.Contains(pl.userData.Reveal(), "squid") {
			t.Errorf("the sample's user-data does not install Squid")
		}

		// As written, against the fake: the entry with the fake's
		// endpoint and key, nothing else changed.
		env := gcptest.New(t)
		cfg.Project, cfg.Endpoint, cfg.CredentialsFile = env.Project, env.Endpoint(), env.KeyFile
		run, err := New(testName, cfg, provider.Options{InstallationID: testInstallation})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = run.Close() })
		got := createRunning(t, bounded(run), req)
		if got.IP == "" || env.Fake.Firewall(env.Project, req.Name) == nil {
			t.Errorf("the sample against %s: %+v, rule %v", file, got, env.Fake.Firewall(env.Project, req.Name))
		}
	}
	// The seed's sample image is refused before any call.
	seed := req
	seed.Placement = provider.Placement{Zone: "us-central1-a", Image: "projects/debian-cloud/global/images/family/debian-12"}
	_, err = pureProvider(t, nil).Create(t.Context(), seed)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "do not run cloud-init") {
		t.Errorf("the seed's debian-cloud image: %v", err)
	}
	kust, err := os.ReadFile(filepath.Join(repoRoot, "config/samples/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(kust, &k); err != nil || !slices.Contains(k.Resources, "proxy_gcp.yaml") {
		t.Errorf("config/samples/kustomization.yaml does not list proxy_gcp.yaml (%v)", err)
	}
}

// Seed gap (gcp): "Wrong label value in the docs: gcp-vm-validation.md
// filters on labels.proxy-operator-managed=yes; the value is true." Every
// mention of the managed label in docs/gcp-provider.md gives the value
// the provider writes, and the doc's filter is the one ListByTag sends.
func TestGapWrongLabelValueInTheDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/gcp-provider.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	mention := regexp.MustCompile(`labels\.` + regexp.QuoteMeta(provider.MarkManaged) + `\s*(=|:)\s*"?([A-Za-z0-9_-]*)"?`)
	found := mention.FindAllStringSubmatch(text, -1)
	if len(found) < 2 {
		t.Fatalf("docs/gcp-provider.md mentions the managed label %d times, want the filter and the gcloud example", len(found))
	}
	for _, m := range found {
		if m[2] != provider.MarkManagedValue {
			t.Errorf("docs/gcp-provider.md filters on %q: the value is %q", m[0], provider.MarkManagedValue)
		}
	}
	p := pureProvider(t, nil)
	p.opts.InstallationID = "<installation ID>"
	if filter := p.ourFilter(); !strings.Contains(text, filter) {
		t.Errorf("docs/gcp-provider.md does not show the filter ListByTag sends: %s", filter)
	}
	// The check can fail: the seed's wording is caught.
	if m := mention.FindStringSubmatch("labels.proxy-operator-managed=yes"); m == nil || m[2] == provider.MarkManagedValue {
		t.Error("the seed's labels.proxy-operator-managed=yes is not caught")
	}
}
