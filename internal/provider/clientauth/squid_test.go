package clientauth

// These tests run Debian's basic_ncsa_auth, the helper Squid asks, on files
// the tests write, and hold its answers against Verify's.
//
// What the helper does with its input (Squid 5.7): it reads a line, takes
// the text up to the first space as the user and all the rest, spaces
// included, as the password, then rfc1738-unescapes both: "%XX" becomes the
// byte XX (except %00), "%%" becomes "%". Squid sends both fields escaped
// (rfc1738_escape: spaces, '%', non-ASCII and other unsafe bytes as %XX),
// so any password without NUL, CR or LF reaches it intact; the tests send
// lines the way Squid does. TestSquidHelperProtocol pins these findings.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

const ncsaHelper = "/usr/lib/squid/basic_ncsa_auth"

type squidHelper struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Reader
}

// startHelper runs basic_ncsa_auth on a file holding contents.
func startHelper(t *testing.T, contents string) *squidHelper {
	t.Helper()
	if _, err := os.Stat(ncsaHelper); err != nil {
		t.Skipf("%s: %v (apt-get install squid)", ncsaHelper, err)
	}
	file := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(file, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, ncsaHelper, file)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
		cancel()
		if stderr.Len() > 0 {
			t.Logf("basic_ncsa_auth stderr: %s", stderr.String())
		}
	})
	return &squidHelper{t: t, in: in, out: bufio.NewReader(out)}
}

// raw writes one line to the helper and returns its answer.
func (h *squidHelper) raw(line string) string {
	h.t.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		h.t.Fatalf("writing to the helper: %v", err)
	}
	answer, err := h.out.ReadString('\n')
	if err != nil {
		h.t.Fatalf("reading the helper's answer: %v", err)
	}
	return strings.TrimRight(answer, "\n")
}

// check asks the helper the way Squid does and says whether it admits.
func (h *squidHelper) check(user, password string) bool {
	h.t.Helper()
	answer := h.raw(escape(user) + " " + escape(password))
	switch {
	case answer == "OK" || strings.HasPrefix(answer, "OK "):
		return true
	case answer == "ERR" || strings.HasPrefix(answer, "ERR "):
		return false
	}
	h.t.Fatalf("the helper answered %q", answer)
	return false
}

// escape encodes every byte but letters and digits as %XX: a superset of
// what Squid's rfc1738_escape encodes, read back alike by the helper.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func TestSquidAgreesWithVerify(t *testing.T) {
	long := strings.Repeat("0123456789", 8) // 80 bytes; bcrypt reads 72
	passwords := map[string]string{
		"alice":          "correct horse battery staple",
		"bob":            "pass word with  spaces ",
		"carol":          "p%41ss:w%%rd+&=?#\\\"'<>",
		"dävé":           "pässwörd ✓",
		"erin":           "x",
		"frank":          long,
		"grace.2a":       "\xff\xff\xa3", // crypt_blowfish's $2a$ test vector
		"heidi.2b":       "\xff\xff\xa3",
		"ivan.2a":        "\xff\xa3",
		"judy.2a":        "\xa3\xff\xff\xa3",
		"ken.2a":         "\xff\xff\xff\xa3\xff\xa3",
		"mike.2a":        "\xff\xff\xff",
		"nina.2a":        "\xff",
		"leo@example.io": "ÿ£ latin-1 as UTF-8",
	}
	variants := map[string]string{"alice": "$2b$", "bob": "$2y$", "carol": "$2a$", "dävé": "$2y$", "erin": "$2b$", "frank": "$2y$",
		"grace.2a": "$2a$", "heidi.2b": "$2b$", "ivan.2a": "$2a$", "judy.2a": "$2a$", "ken.2a": "$2a$", "mike.2a": "$2a$", "nina.2a": "$2a$", "leo@example.io": "$2a$"}
	var file strings.Builder
	file.WriteString("# clients of the egress proxy\r\n\r\n")
	for user, pw := range passwords {
		// x/crypto/bcrypt refuses to hash more than the 72 bytes it reads.
		fmt.Fprintf(&file, "%s:%s\r\n", user, hashOf(t, variants[user], pw[:min(len(pw), 72)]))
	}
	// A commented-out user is nobody to either side.
	fmt.Fprintf(&file, "#mallory:%s\n\n", hashOf(t, "$2b$", "mallory's"))

	u, err := Parse([]byte(file.String()))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if n := len(u.Names()); n != len(passwords) {
		t.Fatalf("Parse read %d users, want %d", n, len(passwords))
	}
	squid := startHelper(t, file.String())

	type trial struct{ user, password string }
	var trials []trial
	for user, pw := range passwords {
		trials = append(trials,
			trial{user, pw},
			trial{user, pw + "!"},
			trial{user, " " + pw},
			trial{user, strings.ToUpper(pw)},
			trial{strings.ToUpper(user), pw},
			trial{user, passwords["alice"]},
		)
	}
	trials = append(trials,
		trial{"frank", long[:72] + "anything after byte 72"},
		trial{"frank", long[:71]},
		trial{"mallory", "mallory's"},
		trial{"nobody", "correct horse battery staple"},
		trial{"alice", "correct horse battery staple\t"},
	)
	// What both must answer, so that the two cannot agree on a wrong answer.
	want := func(tr trial) bool {
		pw, known := passwords[tr.user]
		if !known {
			return false
		}
		if strings.HasSuffix(tr.user, ".2a") && safetyChangesKey2a([]byte(pw)) {
			return false // libcrypt hashes these differently; see safetyChangesKey2a
		}
		if tr.user == "frank" && len(tr.password) >= 72 {
			return tr.password[:72] == pw[:72]
		}
		return tr.password == pw
	}
	for _, tr := range trials {
		bySquid, byVerify := squid.check(tr.user, tr.password), u.Verify(tr.user, tr.password)
		if bySquid != byVerify || byVerify != want(tr) {
			t.Errorf("user %q, password %q: Squid admits=%t, Verify admits=%t, want %t", tr.user, tr.password, bySquid, byVerify, want(tr))
		}
	}
	// The countermeasure must have been tried both ways.
	if !safetyChangesKey2a([]byte(passwords["grace.2a"])) || !safetyChangesKey2a([]byte(passwords["mike.2a"])) ||
		safetyChangesKey2a([]byte(passwords["ivan.2a"])) || safetyChangesKey2a([]byte(passwords["nina.2a"])) {
		t.Error("the $2a$ passwords above no longer cover both sides of the countermeasure")
	}
}

// TestSquidRefusesNonCanonicalSalt shows why Parse refuses a salt with
// stray bits: x/crypto/bcrypt admits the right password, Squid nobody.
func TestSquidRefusesNonCanonicalSalt(t *testing.T) {
	good := hashOf(t, "$2b$", "pw")
	bad := withByte(good, 28, nextInAlphabet(good[28]))
	if bcrypt.CompareHashAndPassword([]byte(bad), []byte("pw")) != nil {
		t.Fatal("x/crypto/bcrypt refuses the right password with stray salt bits; the premise is gone")
	}
	squid := startHelper(t, "good:"+good+"\nbad:"+bad+"\n")
	if !squid.check("good", "pw") {
		t.Fatal("Squid refuses the canonical hash")
	}
	if squid.check("bad", "pw") {
		t.Error("Squid admits the right password with stray salt bits")
	}
	if _, err := Parse([]byte("bad:" + bad)); err == nil {
		t.Error("Parse accepts a salt with stray bits")
	}
}

// TestSquidHelperProtocol pins how basic_ncsa_auth reads its input, which
// escape (and the package comment) rely on.
func TestSquidHelperProtocol(t *testing.T) {
	file := fmt.Sprintf("sp:%s\npct:%s\nlead:%s\n", hashOf(t, "$2b$", "a b"), hashOf(t, "$2b$", "a%41b"), hashOf(t, "$2b$", " pw"))
	squid := startHelper(t, file)
	for _, tc := range []struct {
		line, want string
	}{
		{"sp a%20b", "OK"},    // escaped space
		{"sp a b", "OK"},      // raw space: the password is all after the first space
		{"sp a+b", "ERR"},     // '+' is not a space
		{"pct a%2541b", "OK"}, // escaped '%'
		{"pct a%41b", "ERR"},  // a raw %41 is read as 'A'
		{"pct a%%41b", "OK"},  // "%%" is read as '%'
		{"lead  pw", "OK"},    // two spaces: the second belongs to the password
		{"lead %20pw", "OK"},
		{"sp", "ERR"},  // no password
		{"sp ", "ERR"}, // empty password
		{"nobody a%20b", "ERR"},
	} {
		got := squid.raw(tc.line)
		if got != tc.want && !strings.HasPrefix(got, tc.want+" ") {
			t.Errorf("helper line %q: answer %q, want %s", tc.line, got, tc.want)
		}
	}
}
