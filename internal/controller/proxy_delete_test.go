package controller

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// TestFailedDeleteBackoff: Transient failures of a deletion back off from
// 2 s to DeleteBackoffCap, not to the create path's 5 minutes (the chaos
// drill's 35-60 minute delete tail); quota keeps its own longer backoff;
// each class writes its reason.
func TestFailedDeleteBackoff(t *testing.T) {
	r := &ProxyReconciler{}
	r.init()
	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "px"}}
	transient := provider.Errorf(provider.ErrTransient, "listing: connection reset")

	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		res := r.failedDelete(context.Background(), px, transient)
		if res.RequeueAfter != w {
			t.Errorf("failure %d: RequeueAfter %v, want %v", i+1, res.RequeueAfter, w)
		}
	}
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c == nil || c.Reason != egressv1.ReasonBackendError {
		t.Errorf("Ready after Transient failures: %+v, want reason %s", c, egressv1.ReasonBackendError)
	}

	quota := provider.Errorf(provider.ErrQuotaExceeded, "quota CPUS exceeded")
	if res := r.failedDelete(context.Background(), px, quota); res.RequeueAfter != time.Minute {
		t.Errorf("quota failure: RequeueAfter %v, want the quota backoff's first 1m", res.RequeueAfter)
	}
	if c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady); c == nil || c.Reason != egressv1.ReasonQuotaExceeded {
		t.Errorf("Ready after a quota failure: %+v, want reason %s", c, egressv1.ReasonQuotaExceeded)
	}

	// A finished deletion forgets: the next Proxy of that name starts over.
	r.forget(key(px))
	if res := r.failedDelete(context.Background(), px, transient); res.RequeueAfter != 2*time.Second {
		t.Errorf("after forget: RequeueAfter %v, want 2s", res.RequeueAfter)
	}
}
