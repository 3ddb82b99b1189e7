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
)

func init() {
	metrics.Registry.MustRegister(runsTotal, listErrorsTotal, deletedTotal, wouldDeleteTotal, deleteErrorsTotal)
}

// touchMetrics creates a provider's series at zero, so that a rate or an
// alert on them works before the first error or deletion.
func touchMetrics(providerName string) {
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
	for _, v := range []*prometheus.CounterVec{runsTotal, listErrorsTotal, deletedTotal, wouldDeleteTotal, deleteErrorsTotal} {
		v.DeletePartialMatch(l)
	}
}
