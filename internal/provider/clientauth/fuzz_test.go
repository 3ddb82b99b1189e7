package clientauth

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// Well-formed cost-4 hashes, fixed so that the corpus is.
const (
	fuzzHashA = "$2a$04$CtwEx6Y3ZcO4GTG7hmM.dOhxKBdRcf/ZyLuejKTmfc1E6LFX.olQW"
	fuzzHashY = "$2y$04$CtwEx6Y3ZcO4GTG7hmM.dOhxKBdRcf/ZyLuejKTmfc1E6LFX.olQW"
)

// FuzzParse: Parse never panics; it fails with ErrNoUsers or a *LineError
// inside the file whose message holds nothing that looks like a hash; and
// what it accepts is exactly the file's user lines.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"alice:" + fuzzHashA + "\n",
		"# c\r\nalice:" + fuzzHashA + "\r\n\r\nbob:" + fuzzHashY + "\r\n",
		"alice:" + fuzzHashA + "\nalice:" + fuzzHashY,
		"alice:" + fuzzHashA + ":x",
		" alice:" + fuzzHashA,
		"alice smith:" + fuzzHashA,
		":" + fuzzHashA,
		"alice:$2x$04$CtwEx6Y3ZcO4GTG7hmM.dOhxKBdRcf/ZyLuejKTmfc1E6LFX.olQW",
		"alice:$2a$03$CtwEx6Y3ZcO4GTG7hmM.dOhxKBdRcf/ZyLuejKTmfc1E6LFX.olQW",
		"alice:$2a$04$CtwEx6Y3ZcO4GTG7hmM.dPhxKBdRcf/ZyLuejKTmfc1E6LFX.olQW",
		"alice:$apr1$Qz9ZKVx4$Xf7YBvGIdMsdFCWkvNYKm/",
		"hunter2",
		"",
		"\n#\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := Parse(data)
		lines := bytes.Split(data, []byte("\n"))
		if err != nil {
			if u != nil {
				t.Fatalf("Parse returned users and an error: %v", err)
			}
			var le *LineError
			switch {
			case errors.Is(err, ErrNoUsers):
			case errors.As(err, &le):
				if le.Line < 1 || le.Line > len(lines) {
					t.Fatalf("error on line %d of a %d-line file", le.Line, len(lines))
				}
			default:
				t.Fatalf("error %T %v is neither ErrNoUsers nor a *LineError", err, err)
			}
			msg := err.Error()
			for i := 0; i+2 <= len(data); i++ {
				if data[i] == '$' && data[i+1] == '2' && strings.Contains(msg, string(data[i:min(i+4, len(data))])) {
					t.Fatalf("message %q holds hash-like text from the input", msg)
				}
			}
			// Stronger, and what the reasons promise: no '$' at all.
			if strings.Contains(msg, "$") {
				t.Fatalf("message %q has a '$'", msg)
			}
			return
		}
		// Accepted: the users are the names of the lines that are not
		// comments or blank, each once, sorted, each with a bcrypt hash.
		var want []string
		for _, line := range lines {
			line = bytes.TrimSuffix(line, []byte("\r"))
			if len(bytes.Trim(line, " \t")) == 0 || line[0] == '#' {
				continue
			}
			user, hash, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				t.Fatalf("accepted a line without ':'")
			}
			if _, err := bcrypt.Cost(hash); err != nil {
				t.Fatalf("accepted a hash bcrypt cannot read: %v", err)
			}
			want = append(want, string(user))
		}
		slices.Sort(want)
		if got := u.Names(); !slices.Equal(got, want) || len(slices.Compact(slices.Clone(got))) != len(got) || len(got) == 0 {
			t.Fatalf("Names() = %q, want %q, each once", got, want)
		}
	})
}
