package health

import (
	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// InstallationLabel holds, on each ProviderHealth, the identity of the
// installation whose loop writes it: the key of the instances' installation
// mark, so one selector finds all of an installation's objects. Two
// installations in one cluster share the cluster-scoped ProviderHealth
// kind; each prunes only its own.
const InstallationLabel = provider.MarkInstallation

// labels are the labels of the ProviderHealth objects this loop owns.
func (l *Loop) labels() map[string]string {
	m := map[string]string{ManagedByLabel: ManagedBy}
	if l.Installation != "" {
		m[InstallationLabel] = l.Installation
	}
	return m
}

// foreign reports a ProviderHealth another installation's loop owns: two
// installations configure providers of the same name, and the second must
// not take the first one's object over.
func (l *Loop) foreign(ph *egressv1.ProviderHealth) bool {
	other := ph.Labels[InstallationLabel]
	return l.Installation != "" && other != "" && other != l.Installation
}

// owned reports a ProviderHealth that carries all of this loop's labels.
func (l *Loop) owned(ph *egressv1.ProviderHealth) bool {
	for k, v := range l.labels() {
		if ph.Labels[k] != v {
			return false
		}
	}
	return true
}
