package telemetry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// usersFake is the fake with the optional UsersUpdater; it keeps what it
// was given so the test sees the call arrive whole.
type usersFake struct {
	*closingFake
	got *string
}

func (u usersFake) UpdateUsers(_ context.Context, _ string, users provider.Sensitive) error {
	*u.got = users.Reveal()
	return nil
}

// TestUsersUpdateSpannedAndCounted: UpdateUsers gets a span naming the
// instance and a count sample like every provider call, and the users
// themselves reach the provider but no span attribute.
func TestUsersUpdateSpannedAndCounted(t *testing.T) {
	const users = "sentinel-user:$2y$04$sentinelsentinelsentinelsentinelsentinelsentinelsen\n"
	rec, tp := newRecorder()
	_, fp, _ := newEntry(t, tp)
	name := providerName(t) + "-users"
	var got string
	e := decoratedEntry(t, tp, name, usersFake{fp, &got})
	if e.Users == nil {
		t.Fatal("the entry lost its UsersUpdater")
	}
	before := len(rec.Ended())
	if err := e.Users.UpdateUsers(context.Background(), "fake/x", provider.Sensitive(users)); err != nil {
		t.Fatal(err)
	}
	if got != users {
		t.Fatalf("the provider got %q, want the file as given", got)
	}
	spans := rec.Ended()[before:]
	if len(spans) != 1 {
		t.Fatalf("spans %v, want the update", spanNames(spans))
	}
	wantAttrs(t, spanNamed(t, spans, "provider.update_users"), map[string]string{
		"provider.name": name, "provider.instance.id": "fake/x", "error.class": "none",
	})
	for _, a := range spans[0].Attributes() {
		if strings.Contains(a.Value.Emit(), "sentinel") {
			t.Errorf("span attribute %s carries the users: %q", a.Key, a.Value.Emit())
		}
	}
	if n := testutil.ToFloat64(telemetry.ProviderCalls.WithLabelValues(name, "fake", provider.OpUpdateUsers, "none")); n != 1 {
		t.Errorf("calls{%s,none} = %v, want 1", provider.OpUpdateUsers, n)
	}
}
