package egress

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FuzzParseRanges parses a comma-separated list of would-be CIDRs as a
// providers config lists them. Never a panic; the result stays aligned with
// the input; an accepted range is canonical (it prints as written, masked,
// not IPv4-mapped); every error names its entry's index; and what a refusal
// tells the author to write instead is itself accepted.
func FuzzParseRanges(f *testing.F) {
	path := field.NewPath("providers").Index(0).Child("local", "allowedDestinations")
	f.Fuzz(func(t *testing.T, list string) {
		values := strings.Split(list, ",")
		out, errs := ParseRanges(values, path)
		if len(out) != len(values) {
			t.Fatalf("ParseRanges(%q) gave %d prefixes", values, len(out))
		}
		bad := map[string]bool{}
		for _, e := range errs {
			if !strings.HasPrefix(e.Field, path.String()+"[") {
				t.Fatalf("error %q does not name an entry under %s", e, path)
			}
			bad[e.Field] = true
		}
		for i, v := range values {
			pfx := out[i]
			pathI := path.Index(i).String()
			if !pfx.IsValid() {
				if !bad[pathI] {
					t.Fatalf("entry %d %q has no prefix and no error", i, v)
				}
				_, err := ParseCanonical(v)
				for _, s := range suggestions(err.Error()) {
					if _, serr := ParseCanonical(s); serr != nil {
						t.Fatalf("ParseCanonical(%q) says write %q, which is refused: %v", v, s, serr)
					}
				}
				continue
			}
			if pfx.String() != v || pfx.Masked() != pfx || pfx.Addr().Is4In6() || pfx.Addr().Zone() != "" {
				t.Fatalf("entry %d %q accepted as %v, which is not canonical", i, v, pfx)
			}
		}
	})
}

// suggestions are the ranges an error message tells the author to write:
// each word after "write" or "or" that looks like a CIDR.
func suggestions(msg string) []string {
	var out []string
	words := strings.Fields(msg)
	for i := 1; i < len(words); i++ {
		if (words[i-1] == "write" || words[i-1] == "range" || words[i-1] == "or") && strings.Contains(words[i], "/") {
			out = append(out, strings.TrimRight(words[i], ",."))
		}
	}
	return out
}
