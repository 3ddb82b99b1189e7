// Package clientauthtest makes htpasswd files for tests: bcrypt at the
// lowest cost (the cost does not change what is compared, and tests
// under -race hash many).
package clientauthtest

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// Hash is password's bcrypt hash ($2a$, the lowest cost).
func Hash(t testing.TB, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// Line is the htpasswd line of user with password.
func Line(t testing.TB, user, password string) string {
	t.Helper()
	return user + ":" + Hash(t, password) + "\n"
}

// File is an htpasswd file of user, password pairs, in that order.
func File(t testing.TB, userPassword ...string) string {
	t.Helper()
	if len(userPassword)%2 != 0 {
		t.Fatalf("clientauthtest.File: %d arguments, want user, password pairs", len(userPassword))
	}
	var b strings.Builder
	for i := 0; i < len(userPassword); i += 2 {
		b.WriteString(Line(t, userPassword[i], userPassword[i+1]))
	}
	return b.String()
}
