package clientauth

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
)

// hashOf makes a cost-4 bcrypt hash of password with the given variant
// prefix ("$2a$", "$2b$" or "$2y$"): x/crypto/bcrypt writes $2a$, and the
// three differ only in the prefix for the passwords tests use.
func hashOf(t testing.TB, variant, password string) string {
	t.Helper()
	return variant + clientauthtest.Hash(t, password)[4:]
}

// withByte returns s with the byte at i replaced by b.
func withByte(s string, i int, b byte) string { return s[:i] + string(b) + s[i+1:] }

// nextInAlphabet returns the bcrypt base64 character after c.
func nextInAlphabet(c byte) byte {
	return bcryptAlphabet[strings.IndexByte(bcryptAlphabet, c)+1]
}

func TestParseAcceptsGoodFiles(t *testing.T) {
	a, b, y := hashOf(t, "$2a$", "pw-a"), hashOf(t, "$2b$", "pw-b"), hashOf(t, "$2y$", "pw-y")
	for _, tc := range []struct {
		name string
		file string
		want []string
	}{
		{"one user, no final newline", "alice:" + b, []string{"alice"}},
		{"all three variants", "alice:" + a + "\nbob:" + b + "\ncarol:" + y + "\n", []string{"alice", "bob", "carol"}},
		{"comments and blank lines", "# made by htpasswd -B\n\ncarol:" + y + "\n   \n\t\n#bob:" + b + "\nalice:" + a + "\n\n", []string{"alice", "carol"}},
		{"CRLF", "# c\r\nalice:" + a + "\r\n\r\nbob:" + b + "\r\n", []string{"alice", "bob"}},
		{"UTF-8 and punctuation in names", "dävé:" + a + "\nsvc.build-01@example:" + b + "\n", []string{"dävé", "svc.build-01@example"}},
		{"a 255-byte name", strings.Repeat("n", 255) + ":" + b, []string{strings.Repeat("n", 255)}},
		{"cost 31 is valid", "alice:" + withByte(withByte(b, 4, '3'), 5, '1'), []string{"alice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := Parse([]byte(tc.file))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := u.Names(); !slices.Equal(got, tc.want) {
				t.Errorf("Names() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseReadsHashesOfEachVariant(t *testing.T) {
	file := "alice:" + hashOf(t, "$2a$", "pw-a") + "\r\nbob:" + hashOf(t, "$2b$", "pw-b") + "\r\ncarol:" + hashOf(t, "$2y$", "pw-y") + "\r\n"
	u, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for user, pw := range map[string]string{"alice": "pw-a", "bob": "pw-b", "carol": "pw-y"} {
		if !u.Verify(user, pw) {
			t.Errorf("Verify(%s, right password) = false", user)
		}
		if u.Verify(user, pw+"x") {
			t.Errorf("Verify(%s, wrong password) = true", user)
		}
	}
}

func TestParseRefusesBadLines(t *testing.T) {
	good := hashOf(t, "$2b$", "pw")
	other := hashOf(t, "$2y$", "other")
	saltEnd, digestEnd := 28, 59
	for _, tc := range []struct {
		name   string
		file   string
		line   int
		reason string
	}{
		{"no colon (a pasted password)", "alice:" + good + "\nhunter2hunter2\n", 2, reasonNoColon},
		{"empty user", ":" + good, 1, reasonEmptyUser},
		{"space in user", "bob smith:" + good, 1, reasonUserSpace},
		{"tab in user", "bob\tsmith:" + good, 1, reasonUserSpace},
		{"no-break space in user", "bob\u00a0smith:" + good, 1, reasonUserSpace},
		{"control character in user", "bob\x01:" + good, 1, reasonUserControl},
		{"NUL in user", "bob\x00:" + good, 1, reasonUserControl},
		{"CR inside a user", "bob\rx:" + good, 1, reasonUserSpace},
		{"byte-order mark before the first user", "\ufeffalice:" + good, 1, reasonUserControl},
		{"user not UTF-8", "\xe9ric:" + good, 1, reasonUserUTF8},
		{"user of 256 bytes", strings.Repeat("n", 256) + ":" + good, 1, reasonUserTooLong},
		{"leading space", "  alice:" + good, 1, reasonLeadingSpace},
		{"leading tab", "\talice:" + good, 1, reasonLeadingSpace},
		{"a field after the hash", "alice:" + good + ":Alice Smith", 1, reasonExtraField},
		{"Apache MD5 (htpasswd without -B)", "alice:$apr1$Qz9ZKVx4$Xf7YBvGIdMsdFCWkvNYKm/", 1, reasonHashMD5},
		{"crypt MD5", "alice:$1$Qz9ZKVx4$Xf7YBvGIdMsdFCWkvNYKm/", 1, reasonHashMD5},
		{"SHA-1", "alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", 1, reasonHashSHA},
		{"crypt SHA-512", "alice:$6$Qz9ZKVx4$Xf7YBvGIdMsdFCWkvNYKm", 1, reasonHashSHA},
		{"plain text password", "alice:correcthorsebattery", 1, reasonHashLength},
		{"hash cut short", "alice:" + good[:59], 1, reasonHashLength},
		{"space after the hash", "alice:" + good + " ", 1, reasonHashLength},
		{"variant 2x", "alice:" + withByte(good, 2, 'x'), 1, reasonHashVariant},
		{"variant 2 without minor", "alice:$2$" + good[4:], 1, reasonHashLength},
		{"variant 3a", "alice:" + withByte(good, 1, '3'), 1, reasonHashVariant},
		{"upper-case variant", "alice:" + withByte(good, 2, 'B'), 1, reasonHashVariant},
		{"cost 03", "alice:" + withByte(good, 5, '3'), 1, reasonHashCost},
		{"cost 32", "alice:" + withByte(withByte(good, 4, '3'), 5, '2'), 1, reasonHashCost},
		{"cost not digits", "alice:" + withByte(good, 5, 'a'), 1, reasonHashCost},
		{"no dollar after the cost", "alice:" + withByte(good, 6, 'x'), 1, reasonHashCost},
		{"character outside the alphabet", "alice:" + withByte(good, 40, '+'), 1, reasonHashAlphabet},
		{"stray bits in the salt", "alice:" + withByte(good, saltEnd, nextInAlphabet(good[saltEnd])), 1, reasonHashNonCanonical},
		{"stray bits in the digest", "alice:" + withByte(good, digestEnd, nextInAlphabet(good[digestEnd])), 1, reasonHashNonCanonical},
		{"duplicate user", "alice:" + good + "\nbob:" + good + "\nalice:" + other + "\n", 3, "user already defined on line 1"},
		{"line numbers count comments, blanks and CRLF", "# c\r\n\r\nalice:" + good + "\r\nbob " + other + "\r\n", 4, reasonNoColon},
		{"an overlong comment", "#" + strings.Repeat("c", 1024) + "\nalice:" + good, 1, reasonTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := Parse([]byte(tc.file))
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("Parse = %v, %v; want a *LineError", u, err)
			}
			if le.Line != tc.line || le.Reason != tc.reason {
				t.Errorf("error = line %d %q, want line %d %q", le.Line, le.Reason, tc.line, tc.reason)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "line ") {
				t.Errorf("message %q does not begin with the line number", msg)
			}
			// Nothing of the bad line, user name included, reaches the
			// message: check every 5-byte piece of it.
			bad := strings.Split(tc.file, "\n")[tc.line-1]
			for i := 0; i+5 <= len(bad); i++ {
				if strings.Contains(msg, bad[i:i+5]) {
					t.Fatalf("message %q echoes %q from the bad line", msg, bad[i:i+5])
				}
			}
			if strings.Contains(msg, "$") {
				t.Errorf("message %q has a '$'", msg)
			}
		})
	}
}

func TestParseRefusesFilesWithNoUsers(t *testing.T) {
	for name, file := range map[string]string{
		"empty":         "",
		"only newlines": "\n\r\n\n",
		"only comments": "# alice:" + hashOf(t, "$2b$", "pw") + "\n#\n",
	} {
		if u, err := Parse([]byte(file)); !errors.Is(err, ErrNoUsers) {
			t.Errorf("%s: Parse = %v, %v; want ErrNoUsers", name, u, err)
		}
	}
}

func TestNamesIsACopy(t *testing.T) {
	u, err := Parse([]byte("bob:" + hashOf(t, "$2b$", "pw") + "\nalice:" + hashOf(t, "$2b$", "pw") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	names := u.Names()
	names[0] = "mallory"
	if got := u.Names(); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Errorf("Names() after changing its result = %q", got)
	}
	if (*Users)(nil).Names() != nil || (*Users)(nil).Verify("alice", "pw") {
		t.Error("a nil *Users has names or admits someone")
	}
}

func TestParseProxyAuthorization(t *testing.T) {
	for _, tc := range []struct {
		header         string
		user, password string
		ok             bool
	}{
		{"Basic YWxpY2U6cHc=", "alice", "pw", true},                // alice:pw
		{"basic YWxpY2U6cHc=", "alice", "pw", true},                // scheme in any case
		{"BASIC   YWxpY2U6cHc=  ", "alice", "pw", true},            // spaces around the token
		{"Basic YWxpY2U6cDp3OnJk", "alice", "p:w:rd", true},        // alice:p:w:rd, split at the first ':'
		{"Basic YWxpY2U6cGFzcyB3b3Jk", "alice", "pass word", true}, // alice:pass word
		{"Basic YWxpY2U=", "", "", false},                          // alice: no ':'
		{"Basic YWxpY2U6", "", "", false},                          // alice: empty password
		{"Basic OnB3", "", "", false},                              // :pw empty user
		{"Basic YWxpY2U6cHcNCg==", "", "", false},                  // alice:pw\r\n
		{"Basic YWxpY2U6cHcAeA==", "", "", false},                  // alice:pw\x00x
		{"Basic YWxpY2U6cHc", "", "", false},                       // padding missing
		{"Basic !!!!", "", "", false},
		{"Bearer YWxpY2U6cHc=", "", "", false},
		{"BasicYWxpY2U6cHc=", "", "", false},
		{"Basic", "", "", false},
		{"", "", "", false},
	} {
		user, password, ok := ParseProxyAuthorization(tc.header)
		if user != tc.user || password != tc.password || ok != tc.ok {
			t.Errorf("ParseProxyAuthorization(%q) = %q, %q, %t; want %q, %q, %t", tc.header, user, password, ok, tc.user, tc.password, tc.ok)
		}
	}
	if Challenge != `Basic realm="egress-proxy"` {
		t.Errorf("Challenge = %q", Challenge)
	}
}
