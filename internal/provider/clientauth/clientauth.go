// Package clientauth reads the htpasswd file a Proxy names for client
// authentication and checks Basic credentials against it, so that the local
// provider's Go proxy admits exactly the users Squid's basic_ncsa_auth
// helper admits from the same file.
//
// Only bcrypt entries are accepted (htpasswd -B): they are the one scheme
// both sides compute alike. Parse refuses, rather than skips, every line the
// two could read differently, so a file either means the same set of users
// to both or is refused as a whole.
//
// For the two to agree, Squid's config must say
//
//	auth_param basic program /usr/lib/squid/basic_ncsa_auth <file>
//	auth_param basic casesensitive on
//	auth_param basic realm egress-proxy
//
// casesensitive is off by default, and then Squid lower-cases the user name
// before asking the helper, while the file and Verify compare it byte for
// byte.
//
// Nothing in this package puts a hash, a password or a line of the file
// into an error: a LineError carries a line number and a fixed reason.
package clientauth

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
)

// MaxUserBytes is the longest user name Parse accepts.
const MaxUserBytes = 255

// maxLineBytes bounds every line, comments included: basic_ncsa_auth reads
// the file with fgets into a fixed buffer and would read the rest of an
// overlong line as a line of its own.
const maxLineBytes = 1024

// ErrNoUsers is Parse's answer to a file with no user in it: an
// authentication that admits nobody is a mistake, not a closed proxy.
var ErrNoUsers = errors.New("no users: the htpasswd file has no user:hash line")

// LineError says which line of the file is wrong and why. Reason is one of
// a fixed set of texts; it never holds anything read from the file.
type LineError struct {
	Line   int // 1-based
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Reasons. They contain no '$' so that no message can look like part of a
// hash; FuzzParse checks it.
const (
	reasonTooLong          = "longer than 1024 bytes"
	reasonLeadingSpace     = "begins with whitespace (Squid would skip the line)"
	reasonNoColon          = "no ':' between user and hash"
	reasonExtraField       = "more than one ':' (no fields may follow the hash)"
	reasonEmptyUser        = "empty user name"
	reasonUserTooLong      = "user name longer than 255 bytes"
	reasonUserUTF8         = "user name is not valid UTF-8"
	reasonUserSpace        = "user name contains whitespace"
	reasonUserControl      = "user name contains a control or format character"
	reasonDuplicate        = "user already defined on line %d"
	reasonHashMD5          = "hash is Apache MD5 (htpasswd's default), not bcrypt: make it with htpasswd -B"
	reasonHashSHA          = "hash is SHA-1 or crypt SHA-2, not bcrypt: make it with htpasswd -B"
	reasonHashLength       = "hash is not bcrypt: a bcrypt hash has 60 characters (make it with htpasswd -B)"
	reasonHashVariant      = "hash is not bcrypt of variant 2a, 2b or 2y (make it with htpasswd -B)"
	reasonHashCost         = "bcrypt cost is not two digits from 04 to 31"
	reasonHashAlphabet     = "bcrypt salt or digest has a character outside ./A-Za-z0-9"
	reasonHashNonCanonical = "bcrypt salt or digest is not canonically encoded (Squid would refuse every password)"
)

// Users is a parsed htpasswd file. It is safe for concurrent use.
type Users struct {
	hashes map[string]string // user -> bcrypt hash
	names  []string          // sorted
	// dummy is compared against for unknown users so that they take as long
	// as known ones; its cost is the one most users have.
	dummy []byte
	cache credentialCache
	now   func() time.Time // time.Now; tests move it
}

// Parse reads an htpasswd file: one user:hash per line, hash in bcrypt;
// blank lines and lines beginning with '#' are skipped, CRLF line ends are
// read as LF. The first wrong line ends it with a *LineError; a file with no
// user ends it with ErrNoUsers.
func Parse(data []byte) (*Users, error) {
	u := &Users{hashes: map[string]string{}, cache: newCredentialCache(), now: time.Now}
	definedOn := map[string]int{}
	costs := map[int]int{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		if len(line) > maxLineBytes {
			return nil, &LineError{Line: n, Reason: reasonTooLong}
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.Trim(line, " \t")) == 0 || line[0] == '#' {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, &LineError{Line: n, Reason: reasonLeadingSpace}
		}
		user, hash, found := strings.Cut(string(line), ":")
		if !found {
			return nil, &LineError{Line: n, Reason: reasonNoColon}
		}
		if reason := checkUser(user); reason != "" {
			return nil, &LineError{Line: n, Reason: reason}
		}
		if strings.Contains(hash, ":") {
			return nil, &LineError{Line: n, Reason: reasonExtraField}
		}
		cost, reason := checkHash(hash)
		if reason != "" {
			return nil, &LineError{Line: n, Reason: reason}
		}
		if first, dup := definedOn[user]; dup {
			return nil, &LineError{Line: n, Reason: fmt.Sprintf(reasonDuplicate, first)}
		}
		definedOn[user] = n
		u.hashes[user] = hash
		u.names = append(u.names, user)
		costs[cost]++
	}
	if len(u.names) == 0 {
		return nil, ErrNoUsers
	}
	sort.Strings(u.names)
	u.dummy = dummyHash(mostCommon(costs))
	return u, nil
}

// Names returns the users, sorted. It never returns a hash.
func (u *Users) Names() []string {
	if u == nil {
		return nil
	}
	return append([]string(nil), u.names...)
}

// checkUser returns why user cannot be a user name, or "".
// basic_ncsa_auth splits the file on ':', CR and LF and Squid URL-escapes
// the name on its way to the helper, so any other byte would travel; the
// rules below refuse what a person cannot see or type reliably.
func checkUser(user string) string {
	switch {
	case user == "":
		return reasonEmptyUser
	case len(user) > MaxUserBytes:
		return reasonUserTooLong
	case !utf8.ValidString(user):
		return reasonUserUTF8
	}
	for _, r := range user {
		if unicode.IsSpace(r) {
			return reasonUserSpace
		}
		// Cf catches the invisible ones, like a byte-order mark that an
		// editor left before the first user.
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return reasonUserControl
		}
	}
	return ""
}

// bcryptAlphabet is bcrypt's base64 alphabet, in value order.
const bcryptAlphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// checkHash returns the cost of a bcrypt hash, or why hash is not one that
// both Squid (libcrypt) and x/crypto/bcrypt read alike.
func checkHash(hash string) (cost int, reason string) {
	switch {
	case strings.HasPrefix(hash, "$apr1$") || strings.HasPrefix(hash, "$1$"):
		return 0, reasonHashMD5
	case strings.HasPrefix(hash, "{SHA}") || strings.HasPrefix(hash, "$5$") || strings.HasPrefix(hash, "$6$"):
		return 0, reasonHashSHA
	case len(hash) != 60:
		return 0, reasonHashLength
	}
	// $2x$ is crypt_blowfish's deliberately buggy variant, which
	// x/crypto/bcrypt does not implement.
	if hash[0] != '$' || hash[1] != '2' || !strings.ContainsRune("aby", rune(hash[2])) || hash[3] != '$' {
		return 0, reasonHashVariant
	}
	if hash[6] != '$' || !isDigit(hash[4]) || !isDigit(hash[5]) {
		return 0, reasonHashCost
	}
	cost = int(hash[4]-'0')*10 + int(hash[5]-'0')
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return 0, reasonHashCost
	}
	salt, digest := hash[7:29], hash[29:]
	for i := 7; i < len(hash); i++ {
		if strings.IndexByte(bcryptAlphabet, hash[i]) < 0 {
			return 0, reasonHashAlphabet
		}
	}
	// The last character of the 22-character salt carries 4 bits beyond the
	// 16 bytes, that of the 31-character digest 2 beyond the 23. libcrypt
	// re-encodes the salt and compares strings, so with a stray bit set it
	// refuses every password while x/crypto/bcrypt, which keeps the salt's
	// text, accepts the right one (TestSquidRefusesNonCanonicalSalt).
	if strings.IndexByte(bcryptAlphabet, salt[len(salt)-1])%16 != 0 ||
		strings.IndexByte(bcryptAlphabet, digest[len(digest)-1])%4 != 0 {
		return 0, reasonHashNonCanonical
	}
	// The checks above are stricter than bcrypt.Cost's; this one keeps the
	// two from ever disagreeing in the other direction.
	if c, err := bcrypt.Cost([]byte(hash)); err != nil || c != cost {
		return 0, reasonHashCost
	}
	return cost, ""
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// mostCommon returns the cost most users have, the higher on a tie.
func mostCommon(costs map[int]int) int {
	best, bestN := bcrypt.MinCost, 0
	for c, n := range costs {
		if n > bestN || (n == bestN && c > best) {
			best, bestN = c, n
		}
	}
	return best
}

// dummyBody is the salt and digest of a bcrypt hash of a password nobody
// uses; with any cost in front it is a well-formed hash that costs as much
// to compare as a user's of that cost.
const dummyBody = "CtwEx6Y3ZcO4GTG7hmM.dOhxKBdRcf/ZyLuejKTmfc1E6LFX.olQW"

func dummyHash(cost int) []byte { return fmt.Appendf(nil, "$2b$%02d$%s", cost, dummyBody) }
