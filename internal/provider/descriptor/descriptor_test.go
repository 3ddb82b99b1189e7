package descriptor

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

type stubConfig struct{ Size int }

type stub struct{ cfg stubConfig }

func (*stub) Create(context.Context, provider.CreateRequest) (provider.Instance, error) {
	return provider.Instance{}, nil
}
func (*stub) Get(context.Context, string) (provider.Instance, error) { return provider.Instance{}, nil }
func (*stub) Delete(context.Context, string) error                   { return nil }
func (*stub) ListByTag(context.Context) ([]provider.Instance, error) { return nil, nil }

func parseStub(raw json.RawMessage, path *field.Path) (stubConfig, field.ErrorList) {
	if string(raw) == "bad" {
		return stubConfig{}, field.ErrorList{field.Invalid(path, "bad", "is bad")}
	}
	return stubConfig{Size: len(raw)}, nil
}

// TestTypeOfKeepsTheTypes checks the adaptation: Parse's typed result
// reaches New as it is, New's error is returned without a non-nil
// provider, and ProviderType is the constructor's result type.
func TestTypeOfKeepsTheTypes(t *testing.T) {
	fail := false
	ty := TypeOf(parseStub, func(_ string, c stubConfig, _ provider.Options) (*stub, error) {
		if fail {
			return nil, errors.New("cannot build")
		}
		return &stub{cfg: c}, nil
	}, 3*time.Second)

	settings, errs := ty.Parse(json.RawMessage("abc"), field.NewPath("t"))
	if len(errs) > 0 || settings != (stubConfig{Size: 3}) {
		t.Fatalf("Parse = %v, %v", settings, errs)
	}
	if _, errs := ty.Parse(json.RawMessage("bad"), field.NewPath("t")); len(errs) != 1 || errs[0].Field != "t" {
		t.Errorf("Parse errors = %v, want one under t", errs)
	}
	p, err := ty.New("n", settings, provider.Options{})
	if err != nil || p.(*stub).cfg.Size != 3 {
		t.Fatalf("New = %v, %v", p, err)
	}
	fail = true
	if p, err := ty.New("n", settings, provider.Options{}); err == nil || p != nil {
		t.Errorf("failing New = %v, %v: want a nil provider and the error", p, err)
	}
	if ty.PollInterval != 3*time.Second || ty.ProviderType != reflect.TypeFor[*stub]() {
		t.Errorf("PollInterval %v, ProviderType %v", ty.PollInterval, ty.ProviderType)
	}
}

func TestDescriptorValidate(t *testing.T) {
	ty := TypeOf(parseStub, func(string, stubConfig, provider.Options) (*stub, error) { return &stub{}, nil }, time.Second)
	cases := []struct {
		name string
		d    Descriptor
		want string
	}{
		{"no type", Descriptor{Type: ty, Guide: "x.md"}, "no provider type"},
		{"no constructor", Descriptor{TypeNames: []string{"x"}, Type: Type{PollInterval: time.Second}, Guide: "x.md"}, "no Parse or no New"},
		{"no poll interval", Descriptor{TypeNames: []string{"x"}, Type: Type{Parse: ty.Parse, New: ty.New}, Guide: "x.md"}, "no poll interval"},
		{"no guide", Descriptor{TypeNames: []string{"x"}, Type: ty}, "no guide"},
		// The empty profile is invalid: its errors come with the type's names.
		{"invalid profile", Descriptor{TypeNames: []string{"x", "y"}, Type: ty, Guide: "x.md"}, "provider type x/y: profile: readiness: no value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.d.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, c.want)
			}
		})
	}
}
