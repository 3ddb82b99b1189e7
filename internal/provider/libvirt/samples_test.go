package libvirt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
)

// The shipped providers configs carry the kvm and kvm2 entries commented
// out (they need a real host); config/samples places Proxies on them. The
// seed's sample named a host its config did not define (gap "Sample
// mismatch"), so these tests uncomment the entries, parse them as the
// registry would, under the type name written and under the other one, and
// resolve every sample's placement against them.

const repoRoot = "../../.."

// shippedProvidersConfigs hold the commented kvm and kvm2 entries: the one
// `make run` uses and the deployed one.
var shippedProvidersConfigs = []string{"hack/providers-dev.yaml", "config/manager/providers.yaml"}

// commentedEntryStart is the first line of a commented-out entry.
var commentedEntryStart = regexp.MustCompile(`^(\s*)# - name: (\S+)\s*$`)

var (
	typeLine     = regexp.MustCompile(`^(\s*)type: (\S+)\s*$`)
	blockKeyLine = regexp.MustCompile(`^(\s*)(kvm2?):\s*$`)
)

// uncommentLibvirtEntries returns src with its commented-out kvm and kvm2
// entries uncommented, and their names by type name as written. An entry
// runs from its "# - name:" line over every following line with the same
// comment prefix, up to the next entry or the first other line. With
// switchNames each uncommented entry gets the other type name (its type:
// and its block's key), as a user switching it would write.
func uncommentLibvirtEntries(src string, switchNames bool) (string, map[string][]string, error) {
	lines := strings.Split(src, "\n")
	names := map[string][]string{}
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
		block := make([]string, 0, end-i)
		typeName := ""
		for _, l := range lines[i:end] {
			rest := strings.TrimPrefix(l, prefix)
			switch {
			case strings.TrimSpace(rest) == "":
				block = append(block, "")
				continue
			case !strings.HasPrefix(rest, " "):
				return "", nil, fmt.Errorf("line %q of the commented entry %s does not uncomment (want %q then a space)", l, m[2], prefix)
			}
			u := indent + rest[1:]
			if tm := typeLine.FindStringSubmatch(u); tm != nil && typeName == "" {
				typeName = tm[2]
			}
			block = append(block, u)
		}
		if typeName != TypeKVM && typeName != TypeKVM2 {
			i = end - 1
			continue
		}
		names[typeName] = append(names[typeName], m[2])
		if switchNames {
			other := otherTypeName(typeName)
			for k, u := range block {
				if tm := typeLine.FindStringSubmatch(u); tm != nil && tm[2] == typeName {
					block[k] = tm[1] + "type: " + other
				} else if bm := blockKeyLine.FindStringSubmatch(u); bm != nil && bm[2] == typeName {
					block[k] = bm[1] + other + ":"
				}
			}
		}
		lines = append(lines[:i], append(block, lines[end:]...)...)
		i = end - 1
	}
	return strings.Join(lines, "\n"), names, nil
}

func otherTypeName(t string) string {
	if t == TypeKVM {
		return TypeKVM2
	}
	return TypeKVM
}

// entryTypes are the type names a providers config uses, for config.Parse
// (this package may not import the registry).
func entryTypes(data []byte) ([]string, error) {
	var top struct {
		Providers []struct {
			Type string `json:"type"`
		} `json:"providers"`
	}
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, err
	}
	var types []string
	for _, p := range top.Providers {
		types = append(types, p.Type)
	}
	return types, nil
}

// libvirtEntry is one uncommented entry, parsed.
type libvirtEntry struct {
	typeName string
	cfg      Config
}

// parseLibvirtEntries parses a whole providers config as the registry does
// (the top level, then each libvirt block with Parse under the entry's
// path) and returns its kvm and kvm2 entries by name.
func parseLibvirtEntries(t *testing.T, file, text string) map[string]libvirtEntry {
	t.Helper()
	types, err := entryTypes([]byte(text))
	if err != nil {
		t.Fatalf("%s, uncommented: %v", file, err)
	}
	entries, err := config.Parse([]byte(text), types)
	if err != nil {
		t.Fatalf("%s, uncommented: %v\n%s", file, err, text)
	}
	got := map[string]libvirtEntry{}
	for _, e := range entries {
		if e.Type != TypeKVM && e.Type != TypeKVM2 {
			continue
		}
		cfg, errs := Parse(e.Settings, e.SettingsPath())
		if len(errs) > 0 {
			t.Fatalf("%s, uncommented: %v", file, errs.ToAggregate())
		}
		got[e.Name] = libvirtEntry{typeName: e.Type, cfg: cfg}
	}
	return got
}

// placementErrors says what in a Proxy's placement the entry cannot
// resolve, by Create's own resolver (before any dial).
func placementErrors(cfg Config, pl v1alpha1.Placement) []string {
	p, err := New("samples", cfg, provider.Options{})
	if err != nil {
		return []string{err.Error()}
	}
	defer p.Close()
	_, err = p.resolve(provider.CreateRequest{Name: "proxy-sample", Port: 3128,
		Placement: provider.Placement{Zone: pl.Zone, MachineType: pl.MachineType, Image: pl.Image}})
	var pe *provider.Error
	if errors.As(err, &pe) {
		return []string{pe.Err.Error()}
	}
	if err != nil {
		return []string{err.Error()}
	}
	return nil
}

// sampleProxy is one file of config/samples, decoded strictly.
type sampleProxy struct {
	file  string
	proxy v1alpha1.Proxy
}

func readSamples(t *testing.T) []sampleProxy {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "config/samples/proxy_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in config/samples (err %v)", err)
	}
	sort.Strings(files)
	var samples []sampleProxy
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p v1alpha1.Proxy
		if err := yaml.UnmarshalStrict(data, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if p.Kind != "Proxy" || p.Spec.Provider == "" {
			t.Fatalf("%s: not a Proxy naming a provider entry (kind %q, spec.provider %q)", f, p.Kind, p.Spec.Provider)
		}
		samples = append(samples, sampleProxy{file: filepath.Base(f), proxy: p})
	}
	return samples
}

func TestGapSampleNamesAHostItsConfigDoesNotDefine(t *testing.T) {
	samples := readSamples(t)
	// Every libvirt sample must be checked: proxy_kvm.yaml names a kvm
	// entry, proxy_kvm2.yaml a kvm2 entry, of every shipped config.
	wantType := map[string]string{"proxy_kvm.yaml": TypeKVM, "proxy_kvm2.yaml": TypeKVM2}
	for _, file := range shippedProvidersConfigs {
		data, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		var asWritten map[string]libvirtEntry
		for _, switched := range []bool{false, true} {
			text, names, err := uncommentLibvirtEntries(string(data), switched)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(names[TypeKVM]) == 0 || len(names[TypeKVM2]) == 0 {
				t.Fatalf("%s: want a commented kvm entry and a commented kvm2 entry, found %v", file, names)
			}
			entries := parseLibvirtEntries(t, file, text)
			if !switched {
				asWritten = entries
			}
			for _, s := range samples {
				e, ok := entries[s.proxy.Spec.Provider]
				if !ok {
					if want, isLibvirt := wantType[s.file]; isLibvirt {
						t.Errorf("%s: spec.provider %q names no %s entry of %s", s.file, s.proxy.Spec.Provider, want, file)
					}
					continue
				}
				if want, named := wantType[s.file]; named && !switched && e.typeName != want {
					t.Errorf("%s: spec.provider %q is a %s entry of %s, want %s", s.file, s.proxy.Spec.Provider, e.typeName, file, want)
				}
				for _, msg := range placementErrors(e.cfg, s.proxy.Spec.Placement) {
					t.Errorf("%s against entry %s (type %s) of %s: %s", s.file, s.proxy.Spec.Provider, e.typeName, file, msg)
				}
			}
			if switched {
				// The other type name reads the block to the same config.
				for name, e := range entries {
					if !reflect.DeepEqual(e.cfg, asWritten[name].cfg) || e.typeName == asWritten[name].typeName {
						t.Errorf("%s: entry %s as %s parses to %+v, as %s to %+v", file, name, asWritten[name].typeName, asWritten[name].cfg, e.typeName, e.cfg)
					}
				}
			}
		}
	}
	// The samples' kustomization applies every sample.
	kust, err := os.ReadFile(filepath.Join(repoRoot, "config/samples/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(kust, &k); err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		if !slices.Contains(k.Resources, s.file) {
			t.Errorf("config/samples/kustomization.yaml does not list %s", s.file)
		}
	}
}

// The check above can fail: the seed's own mismatch (a sample on host nas1
// of an entry that defines only beelink) and its kin are reported.
func TestSamplePlacementMismatchIsReported(t *testing.T) {
	cfg, msg := parseEntry(t, TypeKVM, minimalBlock+`images:
  debian-12: {url: "https://cloud.debian.org/images/debian-12-genericcloud-amd64.qcow2", sha256: `+goodSHA+`}
machineTypes:
  small: {vcpus: 1, memoryMiB: 1024}
`)
	if msg != "" {
		t.Fatal(msg)
	}
	two := cfg
	two.Hosts = append(append([]Host(nil), cfg.Hosts...), Host{Name: "nas1", Address: "192.0.2.9", User: "virt", Bridge: "br0"})
	tests := []struct {
		name string
		cfg  Config
		pl   v1alpha1.Placement
		want string // "" means no error
	}{
		{"matching", cfg, v1alpha1.Placement{Zone: "beelink", MachineType: "small", Image: "debian-12"}, ""},
		{"defaults with one host", cfg, v1alpha1.Placement{}, ""},
		{"the seed's sample: a host the entry does not define", cfg, v1alpha1.Placement{Zone: "nas1"}, `placement.zone "nas1" names no host of this entry (beelink)`},
		{"no zone with two hosts", two, v1alpha1.Placement{}, "placement.zone is required: this entry has 2 hosts (beelink, nas1)"},
		{"unknown machine type", cfg, v1alpha1.Placement{MachineType: "large"}, `placement.machineType "large" is not in this entry's machineTypes (small)`},
		{"unknown image", cfg, v1alpha1.Placement{Image: "debian-13"}, `placement.image "debian-13" is not in this entry's images (debian-12), nor an http(s) URL with #sha256=<digest>`},
		{"image by URL without its digest", cfg, v1alpha1.Placement{Image: "https://images.example/d.qcow2"}, "placement.image: an image given by URL needs its digest: https://images.example/d.qcow2#sha256=<64 lower-case hex digits>"},
		{"image by URL with its digest", cfg, v1alpha1.Placement{Image: "https://images.example/d.qcow2#sha256=" + goodSHA}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(placementErrors(tc.cfg, tc.pl), "; ")
			if got != tc.want {
				t.Fatalf("placementErrors = %q, want %q", got, tc.want)
			}
		})
	}
}

// The uncommenting is itself checked: a commented entry whose lines lost
// their "# " prefix is reported, not silently cut short, and only libvirt
// entries are uncommented.
func TestUncommentLibvirtEntries(t *testing.T) {
	src := `providers:
  - name: local
    type: local
  # - name: pods
  #   type: kubernetes
  # - name: vms
  #   type: kvm
  #   kvm:
  #     # a comment stays one
  #     hosts: []
  #
  other: line
`
	got, names, err := uncommentLibvirtEntries(src, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `providers:
  - name: local
    type: local
  # - name: pods
  #   type: kubernetes
  - name: vms
    type: kvm2
    kvm2:
      # a comment stays one
      hosts: []

  other: line
`
	if got != want || !reflect.DeepEqual(names, map[string][]string{TypeKVM: {"vms"}}) {
		t.Fatalf("got names %v and\n%s\nwant\n%s", names, got, want)
	}
	if _, _, err := uncommentLibvirtEntries("  # - name: vms\n  #type: kvm\n", false); err == nil {
		t.Fatal("a line without the space after # was uncommented")
	}
}
