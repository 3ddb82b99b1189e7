package clientauth

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// countCompares makes compareHash count its calls for the rest of the test.
func countCompares(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	orig := compareHash
	compareHash = func(hash, password []byte) error {
		n.Add(1)
		return orig(hash, password)
	}
	t.Cleanup(func() { compareHash = orig })
	return &n
}

func TestVerify(t *testing.T) {
	long := strings.Repeat("L", 72)
	u, err := Parse([]byte("alice:" + hashOf(t, "$2b$", "correct horse") +
		"\nbob:" + hashOf(t, "$2y$", long) +
		"\ncarol:" + hashOf(t, "$2a$", "x") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, password string
		want           bool
	}{
		{"alice", "correct horse", true},
		{"alice", "correct horse ", false},
		{"alice", "correct hors", false},
		{"alice", "Correct horse", false},
		{"Alice", "correct horse", false}, // user names compare byte for byte
		{"mallory", "correct horse", false},
		{"", "correct horse", false},
		{"alice", "", false},
		{"alice", "correct horse\x00", false},
		{"alice", "correct horse\r", false},
		{"carol", "x", true},         // one byte
		{"bob", long, true},          // 72 bytes
		{"bob", long + "tail", true}, // bcrypt reads 72 bytes, Squid's too
		{"bob", long[:71], false},
		{"bob", long + strings.Repeat("t", MaxPasswordBytes-72), true},
		{"bob", long + strings.Repeat("t", MaxPasswordBytes-71), false}, // longer than MaxPasswordBytes
	} {
		if got := u.Verify(tc.user, tc.password); got != tc.want {
			t.Errorf("Verify(%q, %q) = %t, want %t", tc.user, tc.password, got, tc.want)
		}
	}
}

func TestVerifyCachesSuccessesOnly(t *testing.T) {
	u, err := Parse([]byte("alice:" + hashOf(t, "$2b$", "pw") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1e9, 0)
	u.now = func() time.Time { return clock }
	compares := countCompares(t)
	step := func(user, password string, want bool, wantCompares int64) {
		t.Helper()
		before := compares.Load()
		if got := u.Verify(user, password); got != want {
			t.Errorf("Verify(%q, %q) = %t, want %t", user, password, got, want)
		}
		if n := compares.Load() - before; n != wantCompares {
			t.Errorf("Verify(%q, %q) ran %d bcrypt compares, want %d", user, password, n, wantCompares)
		}
	}
	step("alice", "pw", true, 1)
	step("alice", "pw", true, 0) // from the cache
	step("alice", "wrong", false, 1)
	step("alice", "wrong", false, 1) // failures are not cached
	step("mallory", "pw", false, 1)  // unknown users cost a compare too
	clock = clock.Add(CredentialsTTL - time.Second)
	step("alice", "pw", true, 0)
	clock = clock.Add(time.Second)
	step("alice", "pw", true, 1) // expired, checked again
	if n := u.cache.len(); n != 1 {
		t.Errorf("cache holds %d entries, want 1", n)
	}
}

func TestUnknownUsersCostTheCommonCost(t *testing.T) {
	h5, err := bcrypt.GenerateFromPassword([]byte("pw"), 5)
	if err != nil {
		t.Fatal(err)
	}
	u, err := Parse([]byte("a:" + hashOf(t, "$2b$", "pw") + "\nb:" + string(h5) + "\nc:" + hashOf(t, "$2y$", "pw") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := bcrypt.Cost(u.dummy); err != nil || c != 4 {
		t.Errorf("dummy hash cost = %d, %v; want 4, the cost of two users out of three", c, err)
	}
	if _, reason := checkHash(string(u.dummy)); reason != "" {
		t.Errorf("dummy hash is not one Parse accepts: %s", reason)
	}
}

func TestCredentialCacheIsBounded(t *testing.T) {
	c := newCredentialCache()
	t0 := time.Unix(1e9, 0)
	key := func(i int) [sha256.Size]byte { return sha256.Sum256(fmt.Appendf(nil, "%d", i)) }
	for i := range cacheSize + 10 {
		c.add(key(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := c.len(); n != cacheSize {
		t.Errorf("cache holds %d entries after %d adds, want %d", n, cacheSize+10, cacheSize)
	}
	now := t0.Add(time.Duration(cacheSize+10) * time.Millisecond)
	for i := range 10 {
		if c.hit(key(i), now) {
			t.Errorf("entry %d, among the oldest, survived", i)
		}
	}
	if !c.hit(key(cacheSize+9), now) || !c.hit(key(10), now) {
		t.Error("a recent entry was evicted")
	}
	// Once all have expired, adding one sweeps them out.
	later := now.Add(CredentialsTTL + time.Hour)
	c.add(key(-1), later)
	if n := c.len(); n != 1 {
		t.Errorf("cache holds %d entries after everything expired, want 1", n)
	}
}

func TestVerifyConcurrently(t *testing.T) {
	u, err := Parse([]byte("alice:" + hashOf(t, "$2b$", "pw-a") + "\nbob:" + hashOf(t, "$2y$", "pw-b") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		user, password string
		want           bool
	}{{"alice", "pw-a", true}, {"bob", "pw-b", true}, {"alice", "pw-b", false}, {"mallory", "pw-a", false}}
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				tc := cases[(g+i)%len(cases)]
				if u.Verify(tc.user, tc.password) != tc.want {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d concurrent checks answered wrong", n)
	}
}

// The $2a$ countermeasure of crypt_blowfish: its own test vector is the
// password "\xff\xff\xa3", whose $2a$ hash differs from its $2b$ one.
func TestSafetyChangesKey2a(t *testing.T) {
	for pw, want := range map[string]bool{
		"\xff\xff\xa3":          true,
		"\xff\xff\xff":          true,  // ff ff ff 00 in every word
		"\xff":                  false, // ff 00 ff 00: ff behind 00
		"\xa3":                  false, // a high byte first in its word is harmless
		"\xff\xa3":              false, // ff a3 00 ff: the word after differs
		"pässwörd":              false,
		"correct horse battery": false,
		"":                      false,
	} {
		if got := safetyChangesKey2a([]byte(pw)); got != want {
			t.Errorf("safetyChangesKey2a(%q) = %t, want %t", pw, got, want)
		}
	}
	pw := "\xff\xff\xa3"
	h2a := hashOf(t, "$2a$", pw)
	u, err := Parse([]byte("a:" + h2a + "\nb:$2b$" + h2a[4:] + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if bcrypt.CompareHashAndPassword([]byte(h2a), []byte(pw)) != nil {
		t.Fatal("x/crypto/bcrypt does not accept its own hash")
	}
	if u.Verify("a", pw) {
		t.Error("Verify admits, with a $2a$ hash, a password libcrypt hashes differently")
	}
	if !u.Verify("b", pw) {
		t.Error("Verify refuses the same password with the $2b$ hash")
	}
}
