package clientauth

import (
	"crypto/sha256"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// MaxPasswordBytes is the longest password Verify checks. Squid passes
// longer ones (up to about 8 KiB once URL-escaped) but bcrypt reads only
// the first 72 bytes, so a longer password is a client's mistake or an
// attack; the local proxy refuses it where Squid might admit it.
const MaxPasswordBytes = 1024

// CredentialsTTL is how long a checked user and password are taken
// without checking again: local's cache and Squid's auth_param basic
// credentialsttl (the squid package renders this value). It bounds how
// long a removed user or an old password still works where the file was
// replaced in place (a rotation on the kubernetes provider): Squid keeps
// a user whose password it checked for this long, whatever the file says
// since. One bcrypt compare per user and minute is cheap.
const CredentialsTTL = time.Minute

// cacheSize bounds the cache of successful checks.
const cacheSize = 1024

// compareHash is bcrypt.CompareHashAndPassword; tests count its calls.
var compareHash = bcrypt.CompareHashAndPassword

// Verify says whether password is user's. A bcrypt compare costs tens of
// milliseconds, so successful checks are remembered for a while; an unknown
// user costs a compare too, so that timing does not tell users apart.
func (u *Users) Verify(user, password string) bool {
	if u == nil || !squidCarries(password) {
		return false
	}
	hash, known := u.hashes[user]
	if !known {
		_ = compareHash(u.dummy, []byte(password))
		return false
	}
	key := credentialKey(user, password, hash)
	if u.cache.hit(key, u.now()) {
		return true
	}
	if compareHash([]byte(hash), []byte(password)) != nil {
		return false
	}
	if hash[2] == 'a' && safetyChangesKey2a([]byte(password)) {
		return false
	}
	u.cache.add(key, u.now())
	return true
}

// squidCarries says whether Squid would hand password to the helper
// unchanged: it refuses an empty password and credentials with CR or LF,
// and it reads them as a C string, so a NUL would cut the password short
// there; the local proxy refuses all of these.
func squidCarries(password string) bool {
	return password != "" && len(password) <= MaxPasswordBytes && !strings.ContainsAny(password, "\x00\r\n")
}

// safetyChangesKey2a says whether libcrypt's bcrypt, for a $2a$ hash,
// alters its initial state for this password: crypt_blowfish's
// countermeasure against its old sign-extension bug (the one $2x$ keeps)
// fires when a byte with the high bit set sits behind 0xff bytes only in
// one of the key's 32-bit words, so that the buggy and the correct key
// words are equal. x/crypto/bcrypt has no such step, so for these
// passwords the two compute different hashes and Squid refuses the
// password x/crypto/bcrypt accepts. They all hold the byte 0xff, which
// UTF-8 never uses. This is BF_set_key's loop, keeping only the flag.
func safetyChangesKey2a(password []byte) bool {
	key := append(password[:len(password):len(password)], 0) // the C string
	var sign, diff uint32
	p := 0
	for range 18 { // BF_N + 2 words of key schedule
		var correct, buggy uint32
		for j := range 4 {
			c := key[p]
			correct = correct<<8 | uint32(c)
			buggy = buggy<<8 | uint32(int32(int8(c))) // C's sign extension
			if j > 0 {
				sign |= buggy & 0x80
			}
			if c == 0 {
				p = 0
			} else {
				p++
			}
		}
		diff |= correct ^ buggy
	}
	diff |= diff >> 16
	diff &= 0xffff
	diff += 0xffff // bit 16 set iff the words differed somewhere
	sign <<= 9     // bit 16 set iff a high byte sat behind another byte
	return sign&^diff&0x10000 != 0
}

// credentialKey names one user, password and hash in the cache; the hash
// in it acts as a per-user salt.
func credentialKey(user, password, hash string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(user))
	h.Write([]byte{0})
	h.Write([]byte(password))
	h.Write([]byte{0})
	h.Write([]byte(hash))
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// credentialCache remembers successful checks until they expire, at most
// max of them.
type credentialCache struct {
	mu      sync.Mutex
	expires map[[sha256.Size]byte]time.Time
	max     int
	ttl     time.Duration
}

func newCredentialCache() credentialCache {
	return credentialCache{expires: map[[sha256.Size]byte]time.Time{}, max: cacheSize, ttl: CredentialsTTL}
}

func (c *credentialCache) hit(key [sha256.Size]byte, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.expires[key]
	if ok && !now.Before(exp) {
		delete(c.expires, key)
		return false
	}
	return ok
}

func (c *credentialCache) add(key [sha256.Size]byte, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.expires[key]; !ok && len(c.expires) >= c.max {
		c.evict(now)
	}
	c.expires[key] = now.Add(c.ttl)
}

// evict drops the expired entries, or the one closest to expiring when none
// is. It runs after a bcrypt compare, next to which a scan of max entries
// costs nothing.
func (c *credentialCache) evict(now time.Time) {
	var oldest [sha256.Size]byte
	var oldestExp time.Time
	for k, exp := range c.expires {
		if !now.Before(exp) {
			delete(c.expires, k)
			continue
		}
		if oldestExp.IsZero() || exp.Before(oldestExp) {
			oldest, oldestExp = k, exp
		}
	}
	if len(c.expires) >= c.max {
		delete(c.expires, oldest)
	}
}

func (c *credentialCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.expires)
}
