package registry

import (
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/descriptor"
)

// TestEveryTypeHasItsFiles is the checklist of docs/provider-contract.md
// ("Adding a provider") as a test: every registered provider package has
// the package files, a profile, a conformance test, a guide, a row in the
// README's table and its RBAC components; every type name has a sample
// Proxy, listed in the samples' kustomization, on an entry of that type in
// hack/providers-dev.yaml. The other way round, every sample, provider
// guide and component belongs to a registered type, so a descriptor
// dropped from Descriptors fails here too.
func TestEveryTypeHasItsFiles(t *testing.T) {
	conformance := conformanceTests(t)
	devEntries := entryTypes(t, filepath.Join(repoRoot, "hack", "providers-dev.yaml"))
	var kustomization struct{ Resources []string }
	readYAML(t, filepath.Join(repoRoot, "config", "samples", "kustomization.yaml"), &kustomization)
	readme := readText(t, filepath.Join(repoRoot, "README.md"))

	samples, guides, components := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, d := range Descriptors() {
		t.Run(strings.Join(d.TypeNames, "/"), func(t *testing.T) {
			missing := func(format string, args ...any) {
				t.Helper()
				t.Errorf("%s lacks "+format+" (docs/provider-contract.md, Adding a provider)",
					append([]any{strings.Join(d.TypeNames, "/")}, args...)...)
			}
			if d.Type.ProviderType == nil {
				t.Fatal("the descriptor's Type has no ProviderType: build it with descriptor.TypeOf")
			}
			dir := packageDir(d.Type.ProviderType)
			for _, f := range packageFiles(d) {
				if !exists(filepath.Join(dir, f)) {
					missing("the package file %s", rel(filepath.Join(dir, f)))
				}
			}
			if !conformance[dir] && !conformance[pkgPath(d.Type.ProviderType)] {
				missing("a conformance test: a _test.go file in %s, or one importing it, that calls providertest.Run", rel(dir))
			}

			for _, name := range d.TypeNames {
				sample := "proxy_" + name + ".yaml"
				samples[sample] = true
				path := filepath.Join(repoRoot, "config", "samples", sample)
				if !exists(path) {
					missing("a sample Proxy %s", rel(path))
					continue
				}
				if !slices.Contains(kustomization.Resources, sample) {
					missing("%s in the resources of config/samples/kustomization.yaml", sample)
				}
				var proxy struct{ Spec struct{ Provider string } }
				readYAML(t, path, &proxy)
				if got, ok := devEntries[proxy.Spec.Provider]; !ok || got != name {
					missing("an entry %q of type %s in hack/providers-dev.yaml, which its sample names (found type %q)",
						proxy.Spec.Provider, name, got)
				}
			}

			file, anchor, _ := strings.Cut(d.Guide, "#")
			guides[file] = true
			switch text, err := os.ReadFile(filepath.Join(repoRoot, "docs", file)); {
			case d.Guide == "" || err != nil:
				missing("a guide: docs/%s", file)
			case anchor != "" && !slices.Contains(headingAnchors(string(text)), anchor):
				missing("the guide's section: docs/%s has no heading #%s", file, anchor)
			}

			row := "| `" + strings.Join(d.TypeNames, "`/`") + "` |"
			if !slices.ContainsFunc(strings.Split(readme, "\n"), func(l string) bool { return strings.HasPrefix(l, row) }) {
				missing("a row in README.md's table of providers starting %s", row)
			}

			for _, c := range d.Components {
				components[c] = true
				if !exists(filepath.Join(repoRoot, "config", "components", c, "kustomization.yaml")) {
					missing("its RBAC component config/components/%s", c)
				}
			}
		})
	}

	// The other way round: nothing of a provider type that is not registered.
	found, _ := filepath.Glob(filepath.Join(repoRoot, "config", "samples", "proxy_*.yaml"))
	for _, f := range found {
		if !samples[filepath.Base(f)] {
			t.Errorf("%s is the sample of no registered type (registry.Descriptors)", rel(f))
		}
	}
	found, _ = filepath.Glob(filepath.Join(repoRoot, "docs", "*-provider.md"))
	for _, f := range found {
		if !guides[filepath.Base(f)] {
			t.Errorf("%s is the guide of no registered type (registry.Descriptors)", rel(f))
		}
	}
	found, _ = filepath.Glob(filepath.Join(repoRoot, "config", "components", "*"))
	// Components of a feature rather than of a type: address pools
	// (an entry's addressPool, on any type whose profile takes one).
	features := map[string]bool{"address-pools": true, "ipam-crds": true}
	for _, f := range found {
		if !components[filepath.Base(f)] && !features[filepath.Base(f)] {
			t.Errorf("%s is the component of no registered type (registry.Descriptors)", rel(f))
		}
	}
	if len(samples) == 0 || len(guides) == 0 || len(components) == 0 {
		t.Errorf("the checklist saw %d samples, %d guides, %d components: it checks nothing", len(samples), len(guides), len(components))
	}
}

// packageFiles are the files every provider package has, in the shape the
// others have (docs/provider-contract.md, Adding a provider).
func packageFiles(d descriptor.Descriptor) []string {
	dir := packageDir(d.Type.ProviderType)
	files := []string{filepath.Base(dir) + ".go", "descriptor.go", "profile.go", "config.go", "errors.go",
		"create.go", "get.go", "delete.go", "list.go", "fuzz_test.go"}
	if d.Type.ProviderType.Implements(reflect.TypeFor[provider.Checker]()) {
		files = append(files, "check.go")
	}
	return files
}

// conformanceTests returns the directories (relative to this package's)
// and the imported package paths of every _test.go file in the repository
// that calls providertest.Run: a provider's conformance test sits in its
// package or imports it (as a suite against a real backend does).
func conformanceTests(t *testing.T) map[string]bool {
	t.Helper()
	runs := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if name := e.Name(); path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(text, []byte("providertest.Run(")) {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, text, parser.ImportsOnly)
		if err != nil {
			return err
		}
		runs[filepath.Dir(path)] = true
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			runs[p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func pkgPath(impl reflect.Type) string {
	if impl.Kind() == reflect.Pointer {
		impl = impl.Elem()
	}
	return impl.PkgPath()
}

// providersEntry matches an entry of a providers config, commented out or
// not: its `- name:` line and the `type:` line under it.
var providersEntry = regexp.MustCompile(`(?m)^[ \t]*(?:#[ \t]*)?- name:[ \t]*(\S+)[ \t]*\n[ \t]*(?:#[ \t]*)?type:[ \t]*(\S+)[ \t]*$`)

// entryTypes maps the names of a providers config's entries, the
// commented-out examples included, to their types.
func entryTypes(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range providersEntry.FindAllStringSubmatch(readText(t, path), -1) {
		out[m[1]] = m[2]
	}
	if len(out) == 0 {
		t.Fatalf("no entries in %s", path)
	}
	return out
}

// headingAnchors are the anchors GitHub gives a Markdown page's headings
// (outside code blocks): lower case, spaces to hyphens, other punctuation
// dropped.
func headingAnchors(text string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if fenced || !ok || !strings.HasPrefix(l, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// rel is path relative to the repository's root, for messages.
func rel(path string) string {
	r, err := filepath.Rel(repoRoot, path)
	if err != nil {
		return path
	}
	return r
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readText(t *testing.T, path string) string {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(readText(t, path)), out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
