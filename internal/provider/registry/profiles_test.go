package registry

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// TestProfilesMatchCode checks every shipped provider's profile (the
// source of docs/providers.md) against the code it describes: each type
// name is claimed by one descriptor; each descriptor is valid; Checker and
// SecondaryLister are implemented exactly when the profile says so; the
// states and check reasons the package's code names are the ones its
// profile lists; its child spans come from where the profile says; and a
// profile that delivers cloud-init uses the shared NoCloud seed or the
// metadata key it names, with the generated Squid cloud-config, while one
// that ignores it never renders or reveals it.
func TestProfilesMatchCode(t *testing.T) {
	covered := map[string]int{}
	for _, d := range Descriptors() {
		for _, ty := range d.TypeNames {
			covered[ty]++
		}
	}
	for ty, n := range covered {
		if n != 1 {
			t.Errorf("type %q is claimed by %d descriptors, want 1", ty, n)
		}
	}

	for _, d := range Descriptors() {
		prof := d.Profile
		t.Run(strings.Join(d.TypeNames, "/"), func(t *testing.T) {
			if err := d.Validate(); err != nil {
				t.Error(err)
			}
			impl := d.Type.ProviderType
			if impl == nil {
				t.Fatal("the descriptor's Type has no ProviderType: build it with descriptor.TypeOf")
			}
			src := scanPackage(t, impl)
			check := func(name string, ok bool, format string, args ...any) {
				t.Helper()
				if !ok {
					t.Errorf(format, args...)
				}
			}

			checker := impl.Implements(reflect.TypeFor[provider.Checker]())
			check("checker", checker == prof.Check.Implemented,
				"implements Checker: %v, profile says %v", checker, prof.Check.Implemented)
			lister := impl.Implements(reflect.TypeFor[provider.SecondaryLister]())
			explicit := slices.Contains(prof.SecondaryResources.Values, profile.SecondaryResourcesExplicit)
			check("secondary-lister", lister == explicit,
				"implements SecondaryLister: %v, profile's secondary-resources %v", lister, prof.SecondaryResources.Values)

			var declared []string
			for _, s := range prof.States {
				declared = append(declared, string(s))
			}
			check("states", reflect.DeepEqual(sorted(declared), sorted(keys(src.states))),
				"states in the code %v, in the profile %v", sorted(keys(src.states)), sorted(declared))

			for _, r := range prof.Check.Reasons {
				check("reasons", src.reasons[r] || src.literals[r],
					"check reason %q of the profile is named nowhere in the package's code", r)
			}
			for r := range src.reasons {
				check("reasons", slices.Contains(prof.Check.Reasons, r),
					"the code names check reason %q, which the profile does not list", r)
			}

			otel := false
			for imp := range src.imports {
				otel = otel || strings.HasPrefix(imp, "go.opentelemetry.io/")
			}
			for _, cs := range prof.ChildSpans.Values {
				switch cs {
				case profile.ChildSpansTransportWrapper:
					check("child-spans", src.imports["internal/provider/httpobserve"],
						"profile says child spans from a transport wrapper, but the package does not use internal/provider/httpobserve")
				case profile.ChildSpansSpanDecorator:
					check("child-spans", src.imports["go.opentelemetry.io/otel/trace"] && !src.imports["internal/provider/httpobserve"],
						"profile says the package starts its own spans, but it does not import go.opentelemetry.io/otel/trace, or uses httpobserve")
				case profile.ChildSpansNone:
					check("child-spans", !otel && !src.imports["internal/provider/httpobserve"],
						"profile says no child spans, but the package imports OpenTelemetry or httpobserve")
				}
			}

			delivery := prof.CloudInit.Values
			switch {
			case slices.Contains(delivery, profile.CloudInitIgnored):
				check("cloud-init", !src.imports["internal/provider/nocloud"] && !src.rendersUserData && !src.revealsCloudInit,
					"profile says cloud-init is ignored, yet the package builds a seed, renders user-data or reveals CloudInit")
			default:
				check("generated-cloud-config", src.rendersUserData,
					"profile says cloud-init is delivered, but the package never calls squid.UserData (the generated Squid cloud-config)")
			}
			if slices.Contains(delivery, profile.CloudInitNoCloudSeed) {
				check("cloud-init", src.imports["internal/provider/nocloud"],
					"profile says a NoCloud seed, but the package does not import internal/provider/nocloud")
			}
			if slices.Contains(delivery, profile.CloudInitInstanceMetadata) {
				check("cloud-init", src.literals["user-data"],
					"profile says instance metadata, but the package never names the \"user-data\" key")
			}
		})
	}
}

// source is what TestProfilesMatchCode reads off a package's non-test
// code but profile.go: the provider.State* and provider.Reason* constants it names, the
// Reason* string constants it declares, its string literals and imports
// (module-relative), and whether it renders the generated Squid user-data
// (squid.UserData) or reveals CloudInit.
type source struct {
	states, reasons, literals, imports map[string]bool
	rendersUserData, revealsCloudInit  bool
}

const module = "github.com/egress-proxies-operator/egress-proxies-operator/"

func scanPackage(t *testing.T, impl reflect.Type) source {
	t.Helper()
	dir := packageDir(impl)
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files for %s in %s: %v", impl, dir, err)
	}
	src := source{states: map[string]bool{}, reasons: map[string]bool{}, literals: map[string]bool{}, imports: map[string]bool{}}
	fset := token.NewFileSet()
	for _, name := range files {
		// The profile itself names states and reasons: it is what is checked.
		if strings.HasSuffix(name, "_test.go") || filepath.Base(name) == "profile.go" {
			continue
		}
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, text, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			src.imports[strings.TrimPrefix(path, module)] = true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok {
					// CloudInit.Reveal() on any receiver (req.CloudInit).
					if inner, ok := n.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "CloudInit" && n.Sel.Name == "Reveal" {
						src.revealsCloudInit = true
					}
					return true
				}
				sel := n.Sel.Name
				switch {
				case x.Name == "provider" && strings.HasPrefix(sel, "State") && sel != "State":
					src.states[strings.TrimPrefix(sel, "State")] = true
				case x.Name == "provider" && strings.HasPrefix(sel, "Reason"):
					src.reasons[strings.TrimPrefix(sel, "Reason")] = true
				case x.Name == "squid" && sel == "UserData":
					src.rendersUserData = true
				}
			case *ast.ValueSpec:
				// Exported Reason* constants the package declares itself.
				for i, id := range n.Names {
					if strings.HasPrefix(id.Name, "Reason") && i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							src.reasons[v] = true
						}
					}
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					v, _ := strconv.Unquote(n.Value)
					src.literals[v] = true
				}
			}
			return true
		})
	}
	return src
}

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../../.."

// packageDir is the directory of the package that defines impl (a type or
// a pointer to one), relative to this package's.
func packageDir(impl reflect.Type) string {
	if impl.Kind() == reflect.Pointer {
		impl = impl.Elem()
	}
	return filepath.Join(repoRoot, strings.TrimPrefix(impl.PkgPath(), module))
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}
