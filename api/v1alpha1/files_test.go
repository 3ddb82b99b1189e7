package v1alpha1_test

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestCRDKustomization: `make install` and config/default apply
// config/crd, so a CRD missing from its kustomization is never installed.
func TestCRDKustomization(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "config", "crd", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	bases, _ := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	var want []string
	for _, b := range bases {
		want = append(want, "bases/"+filepath.Base(b))
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Fatalf("config/crd/kustomization.yaml resources %v, want every base %v", got, want)
	}
}

// TestSamplesAreValid submits every sample (dry run) so a sample that the
// CRD refuses is caught here rather than by a newcomer.
func TestSamplesAreValid(t *testing.T) {
	ns := newNamespace(t)
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "config", "samples", "*.yaml"))
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue // an empty document between ---
			}
			u.SetNamespace(ns)
			if err := env.Client.Create(t.Context(), u, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %q refused: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
			n++
		}
	}
	t.Logf("%d sample objects accepted", n)
}

// TestDocsCoverReasonsAndPhases: docs/api.md explains every Ready reason
// and phase declared in proxy_types.go, so a new constant needs its line.
func TestDocsCoverReasonsAndPhases(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "api", "v1alpha1", "proxy_types.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Reason") && !strings.HasPrefix(name.Name, "Phase") {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			checked++
			// A table row starts with the value in backquotes.
			if !bytes.Contains(doc, []byte("| `"+v+"` |")) {
				t.Errorf("docs/api.md has no row for %s (%q)", name.Name, v)
			}
		}
		return true
	})
	if checked < 16 {
		t.Fatalf("found only %d Reason/Phase constants; is the parse right?", checked)
	}
}
