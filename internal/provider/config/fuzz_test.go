package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// fileErrors are the two errors about the whole file, which have no path.
var fileErrors = []string{"not valid YAML: ", "the file must be a mapping"}

// FuzzParse feeds arbitrary bytes to Parse. It must never panic; every
// error is either about the whole file or a list of field errors each
// naming its path; and a file it accepts, written back out from the
// entries, parses to the same entries.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := Parse(data, types)
		if err != nil {
			if why := testenv.FieldPathed(err, "", fileErrors...); why != "" {
				t.Fatal(why)
			}
			return
		}
		again, err := Parse(render(t, es), types)
		if err != nil {
			t.Fatalf("Parse refused its own entries written back: %v\ninput: %q", err, data)
		}
		if len(again) != len(es) {
			t.Fatalf("round trip: %d entries, want %d", len(again), len(es))
		}
		for i := range es {
			a, b := es[i], again[i]
			if a.Name != b.Name || a.Type != b.Type || a.Path.String() != b.Path.String() || !sameJSON(t, a.Settings, b.Settings) {
				t.Fatalf("round trip of entry %d: got %+v, want %+v", i, b, a)
			}
		}
	})
}

// FuzzStrict feeds arbitrary JSON to Strict with a nested config type: no
// panic, every error under the block's path, and a block it accepts
// re-encodes to one that decodes to the same value.
func FuzzStrict(f *testing.F) {
	p := field.NewPath("providers").Index(2).Child("local")
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s sample
		if errs := Strict(raw, &s, p); len(errs) > 0 {
			for _, e := range errs {
				if !strings.HasPrefix(e.Field, p.String()) {
					t.Fatalf("error %q is not under %s", e, p)
				}
			}
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back sample
		if errs := Strict(out, &back, p); len(errs) > 0 {
			t.Fatalf("Strict refused its own value %s: %v", out, errs)
		}
		if again, _ := json.Marshal(back); string(again) != string(out) {
			t.Fatalf("round trip: %s, want %s", again, out)
		}
	})
}

// render writes entries back as a providers file, in JSON (which is YAML)
// with every non-ASCII rune escaped: YAML refuses raw control characters
// (U+0080 and the like) that a file may spell with escapes.
func render(t *testing.T, es []Entry) []byte {
	t.Helper()
	list := make([]map[string]any, len(es))
	for i, e := range es {
		m := map[string]any{"name": e.Name, "type": e.Type}
		if e.Settings != nil {
			m[e.Type] = e.Settings
		}
		list[i] = m
	}
	out, err := json.Marshal(map[string]any{"providers": list})
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	return asciiJSON(out)
}

// asciiJSON escapes every non-ASCII rune of JSON text (they occur only
// inside strings) as \uXXXX, in UTF-16 as JSON spells them.
func asciiJSON(js []byte) []byte {
	var b strings.Builder
	for _, r := range string(js) {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, "\\u%04x\\u%04x", hi, lo)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return []byte(b.String())
}

func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("settings %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("settings %s: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}
