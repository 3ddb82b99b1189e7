package v1alpha1_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "v1alpha1-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
