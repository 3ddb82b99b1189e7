package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionHealthy is ProviderHealth's condition.
const ConditionHealthy = "Healthy"

// ProviderHealthStatus is the outcome of the latest check of one provider.
type ProviderHealthStatus struct {
	// Type is the provider's type: its providers-config entry's `type`
	// (docs/providers.md compares the shipped types).
	// +optional
	Type string `json:"type,omitempty"`
	// Target names what was checked (listeners, apiserver, a project, hosts).
	// +optional
	Target string `json:"target,omitempty"`
	// Address is where the target was reached.
	// +optional
	Address string `json:"address,omitempty"`
	// Details holds what the check learned: versions, free capacity.
	// +optional
	Details map[string]string `json:"details,omitempty"`
	// LastCheckTime is when a check last confirmed this status. It is
	// written when the status changes and at least every heartbeat (5 min
	// by default) otherwise, so an older one means nobody is checking.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`
	// Conditions: Healthy, with a reason from the provider's list.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProviderHealth reports whether the operator can reach one configured
// provider's backend, and why not. It is named after the provider and
// written only by the operator.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=egress
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.status.type`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].reason`
// +kubebuilder:printcolumn:name="Last Check",type=date,JSONPath=`.status.lastCheckTime`
type ProviderHealth struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status ProviderHealthStatus `json:"status,omitempty"`
}

// ProviderHealthList is a list of ProviderHealth objects.
// +kubebuilder:object:root=true
type ProviderHealthList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderHealth `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProviderHealth{}, &ProviderHealthList{})
}
