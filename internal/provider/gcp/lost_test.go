package gcp

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// TestLostInstanceIsMadeAgain: an instance deleted outside the operator
// within the hour GCE remembers its insert's request ID is made again by
// the same request. The insert under the old request ID answers with the
// old (done) operation and makes nothing; the provider reads that the
// instance is gone and inserts anew under the next request ID. Without
// that, the lost instance of a Proxy (or of a group's holder) stayed
// "preparing the instance" for an hour.
func TestLostInstanceIsMadeAgain(t *testing.T) {
	env := gcptest.New(t)
	p := newTestProvider(t, env, nil)
	req := testRequest("lost")
	first := createRunning(t, p, req)
	b := &fakeBackend{env: env}
	b.latest.Built(p)
	b.Vanish(t, first.ID)

	if _, err := p.Create(t.Context(), req); err != nil {
		t.Fatalf("Create after the instance was lost: %v", err)
	}
	var again provider.Instance
	testenv.EventuallyNil(t, "the lost instance made again", func() error {
		inst, err := p.Get(t.Context(), first.ID)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			// The reconciler creates again on NotFound, as here.
			if _, err := p.Create(t.Context(), req); err != nil && !errors.Is(err, provider.ErrTransient) {
				t.Fatalf("Create: %v", err)
			}
			return err
		case err != nil:
			return err
		case inst.State != provider.StateRunning:
			return fmt.Errorf("state %s (%s)", inst.State, inst.Progress)
		}
		again = inst
		return nil
	})
	inserts := env.Fake.Count(http.MethodPost, insertPath)
	if inserts != 3 {
		t.Errorf("%d inserts, want 3: the first, the one answered with its done operation, and the new one", inserts)
	}
	t.Logf("instance %s lost and made again (state %s at %s) after %d inserts", again.ID, again.State, again.IP, inserts)
}
