package gc

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	runsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_runs_total",
		Help: "Garbage-collection passes per provider, failed ones included.",
	}, []string{"provider"})
	listErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_list_errors_total",
		Help: "Garbage-collection passes whose ListByTag failed; nothing was collected on that provider in them.",
	}, []string{"provider"})
	deletedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_instances_deleted_total",
		Help: "Instances the garbage collector deleted, by reason (orphan, duplicate).",
	}, []string{"provider", "reason"})
	wouldDeleteTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_instances_would_delete_total",
		Help: "Instances a dry-run garbage collector would have deleted, by reason; each counted once while it stays listed.",
	}, []string{"provider", "reason"})
	deleteErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_delete_errors_total",
		Help: "Deletes by the garbage collector that failed; they are tried again on the next pass.",
	}, []string{"provider"})

	// Secondary resources (provider.SecondaryLister), by kind.
	secondaryListErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_secondary_list_errors_total",
		Help: "Garbage-collection passes whose ListSecondary failed; no secondary resource was collected on that provider in them.",
	}, []string{"provider"})
	secondariesDeletedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_secondaries_deleted_total",
		Help: "Secondary resources the garbage collector deleted, by kind and reason (orphan, leftover).",
	}, []string{"provider", "kind", "reason"})
	secondariesWouldDeleteTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_secondaries_would_delete_total",
		Help: "Secondary resources a dry-run garbage collector would have deleted, by kind and reason; each counted once while it stays listed.",
	}, []string{"provider", "kind", "reason"})
	secondaryDeleteErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egress_proxy_gc_secondary_delete_errors_total",
		Help: "DeleteSecondary calls by the garbage collector that failed, by kind; they are tried again on the next pass.",
	}, []string{"provider", "kind"})
)

func init() {
	metrics.Registry.MustRegister(runsTotal, listErrorsTotal, deletedTotal, wouldDeleteTotal, deleteErrorsTotal,
		secondaryListErrorsTotal, secondariesDeletedTotal, secondariesWouldDeleteTotal, secondaryDeleteErrorsTotal)
}

// touchMetrics creates a provider's series at zero, so that a rate or an
// alert on them works before the first error or deletion. The secondary
// series whose kind is a label start at the first one of that kind.
func touchMetrics(providerName string, secondaries bool) {
	if secondaries {
		secondaryListErrorsTotal.WithLabelValues(providerName).Add(0)
	}
	listErrorsTotal.WithLabelValues(providerName).Add(0)
	deleteErrorsTotal.WithLabelValues(providerName).Add(0)
	for _, r := range []Reason{ReasonOrphan, ReasonDuplicate} {
		deletedTotal.WithLabelValues(providerName, string(r)).Add(0)
		wouldDeleteTotal.WithLabelValues(providerName, string(r)).Add(0)
	}
}

// forgetMetrics drops the series of a provider removed from the config.
func forgetMetrics(providerName string) {
	l := prometheus.Labels{"provider": providerName}
	for _, v := range []*prometheus.CounterVec{runsTotal, listErrorsTotal, deletedTotal, wouldDeleteTotal, deleteErrorsTotal,
		secondaryListErrorsTotal, secondariesDeletedTotal, secondariesWouldDeleteTotal, secondaryDeleteErrorsTotal} {
		v.DeletePartialMatch(l)
	}
}
