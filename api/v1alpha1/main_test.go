package v1alpha1_test

import (
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// env is one control plane for every test here: the rules under test live
// in the installed CRDs, so only a real API server can judge them.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env)
}

// newNamespace gives a test its own namespace, so names never collide
// between tests.
func newNamespace(t *testing.T) string { return env.Namespace(t, "v1alpha1") }
