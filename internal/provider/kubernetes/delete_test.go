package kubernetes

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGoing(t *testing.T) {
	now := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { ts := metav1.NewTime(now.Add(d)); return &ts }
	for _, tc := range []struct {
		name        string
		deletion    *metav1.Time
		deletedByUs bool
		want        bool
	}{
		{"untouched", nil, false, false},
		{"deleted by us, not seen since", nil, true, true},
		{"terminating within its grace", at(20 * time.Second), true, true},
		{"terminating within its grace, someone else's delete", at(time.Second), false, true},
		{"past its grace: delete again", at(-time.Second), true, false},
		{"grace 0 left terminating", at(0), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{DeletionTimestamp: tc.deletion}
			if got := going(obj, tc.deletedByUs, now); got != tc.want {
				t.Errorf("going = %v, want %v", got, tc.want)
			}
		})
	}
}
