package registry

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// FuzzProvidersConfig feeds arbitrary bytes through the operator's own
// read of a providers file (config.Parse, then every type's Parse: strict
// decoding, defaults, validation) over every type the operator ships. It
// must never panic; every error is about the whole file or names a field
// path, and an error from a type's block is under that entry's block; and
// an entry it accepts, its decoded settings encoded back to JSON, decodes
// to the same settings (defaults and validation are idempotent).
func FuzzProvidersConfig(f *testing.F) {
	r := New(DefaultTypes(), provider.Options{InstallationID: "fuzz"})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseAndValidate(r, data)
		if err != nil {
			if why := testenv.FieldPathed(err, "", "not valid YAML: ", "the file must be a mapping"); why != "" {
				t.Fatal(why)
			}
		}
		top, err := config.Parse(data, r.TypeNames())
		if err != nil {
			return
		}
		for _, e := range top {
			_, errs := r.types[e.Type].Parse(e.Settings, e.SettingsPath())
			for _, fe := range errs {
				if !strings.HasPrefix(fe.Field, e.SettingsPath().String()) {
					t.Fatalf("error %q of %s is not under its block", fe, e.SettingsPath())
				}
			}
		}
		if entries == nil {
			return
		}
		ps, err := r.parse(entries)
		if err != nil {
			t.Fatalf("parse after a passing Validate: %v", err)
		}
		for _, p := range ps {
			raw, err := json.Marshal(p.settings)
			if err != nil {
				t.Fatalf("%s: Marshal: %v", p.e.Path, err)
			}
			again, errs := r.types[p.e.Type].Parse(raw, p.e.SettingsPath())
			if len(errs) > 0 {
				t.Fatalf("%s: its own settings %s re-encoded are refused: %v", p.e.Path, raw, errs.ToAggregate())
			}
			if !reflect.DeepEqual(again, p.settings) {
				t.Fatalf("%s: settings re-decoded\n got %#v\nwant %#v", p.e.Path, again, p.settings)
			}
		}
	})
}
