package v1alpha1_test

import (
	"slices"
	"testing"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// TestRecordedProviderIDs: every recorded ID, and no empty one, since the
// garbage collector keeps whatever this list names.
func TestRecordedProviderIDs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status egressv1.ProxyStatus
		want   []string
	}{
		{"nothing recorded", egressv1.ProxyStatus{}, nil},
		{"serving", egressv1.ProxyStatus{ProviderID: "a"}, []string{"a"}},
		{"retiring only", egressv1.ProxyStatus{RetiringProviderID: "b"}, []string{"b"}},
		{"replacing", egressv1.ProxyStatus{ProviderID: "a", RetiringProviderID: "b"}, []string{"a", "b"}},
		{"superseded", egressv1.ProxyStatus{ProviderID: "a", SupersededProviderIDs: []string{"c", "", "d"}}, []string{"a", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.status.RecordedProviderIDs(); !slices.Equal(got, tc.want) {
				t.Errorf("RecordedProviderIDs() = %q, want %q", got, tc.want)
			}
		})
	}
}
