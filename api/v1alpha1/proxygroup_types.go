package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxGroupMembers bounds spec.members: a group is for failover, not for
// scale-out, and each member is an instance with its own cost.
const MaxGroupMembers = 8

// LabelGroup is on every member Proxy: the name of its ProxyGroup. The
// group owns its members (a controller OwnerReference), so deleting the
// group deletes them.
const LabelGroup = "egress.proxy-operator.dev/group"

// LabelGroupMember is on every member Proxy: its index in the group, 0 to
// spec.members-1. It decides the member's zone in spec.spread.zones and
// the order of a roll.
const LabelGroupMember = "egress.proxy-operator.dev/member"

// AnnotationTemplateHash is on every member Proxy: a hash of the spec the
// group gave it, so a template change is seen as members to roll.
const AnnotationTemplateHash = "egress.proxy-operator.dev/template-hash"

// ProxyTemplateMeta is what a member Proxy's metadata takes from the
// template.
type ProxyTemplateMeta struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ProxyTemplate is the Proxy every member is made from.
type ProxyTemplate struct {
	// +optional
	Metadata ProxyTemplateMeta `json:"metadata,omitempty"`
	Spec     ProxySpec         `json:"spec"`
}

// GroupSpread places the members apart, one per zone (a GCE zone, a
// libvirt host, a Proxmox node, a Kubernetes zone label: what
// spec.placement.zone means on the provider).
type GroupSpread struct {
	// Zones are the places members go, member i to zones[i mod len].
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	Zones []string `json:"zones"`
	// AllowSharing lets members share a zone when zones are fewer than
	// members; without it such a spec is refused, since the loss of one
	// zone would then take more than one member.
	// +optional
	AllowSharing bool `json:"allowSharing,omitempty"`
}

// ProxyGroupSpec is the desired group.
// +kubebuilder:validation:XValidation:rule="!has(self.spread) || (has(self.spread.allowSharing) && self.spread.allowSharing) || size(self.spread.zones) >= self.members",message="spec.spread.zones must list at least spec.members zones (one member per zone), or set spec.spread.allowSharing",fieldPath=".spread.zones"
// +kubebuilder:validation:XValidation:rule="!has(self.spread) || !has(self.template.spec.placement) || !has(self.template.spec.placement.zone)",message="spec.template.spec.placement.zone is set by spec.spread for each member: leave it out",fieldPath=".template.spec.placement.zone"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.groupAddress)",message="spec.template.spec.groupAddress is written by the group on each member: leave it out",fieldPath=".template.spec.groupAddress"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.egressAddress)",message="spec.template.spec.egressAddress would give every member one address of its own; a group's stable address is the group's",fieldPath=".template.spec.egressAddress"
type ProxyGroupSpec struct {
	// Members is how many member Proxies the group runs.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	// +kubebuilder:default=2
	// +optional
	Members int32 `json:"members,omitempty"`
	// Template is each member's Proxy. A change rolls the members one at
	// a time, the endpoint's holder last.
	Template ProxyTemplate `json:"template"`
	// Spread places the members on distinct zones; without it they go
	// where the template's placement says.
	// +optional
	Spread *GroupSpread `json:"spread,omitempty"`
	// ProgressDeadlineSeconds is how long a member may take to become
	// ready and settled (made, rolled to the template, or coming back)
	// before the group's Stalled names it (ProgressDeadlineExceeded): the
	// roll then waits for that member or for a person. As a Deployment's.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +kubebuilder:default=600
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
	// EgressAddress is the group's own egress address on a provider that
	// moves one between instances (gcp): one the operator reserves for
	// the group (named after it), or one the user reserved (name). The
	// group moves it to the member that holds its endpoint, so clients and
	// destinations see one address whichever member serves; the members
	// themselves come up on addresses of their own. On an entry with an
	// addressPool the group holds a pool address instead (leave this
	// out); elsewhere it is refused in Stalled. docs/groups.md.
	// +kubebuilder:validation:XValidation:rule="!has(self.address)",message="address is for a Proxy on an entry with an addressPool; a group on such an entry gets its own pool address: leave spec.egressAddress out",fieldPath=".address"
	// +optional
	EgressAddress *EgressAddressSpec `json:"egressAddress,omitempty"`
}

// GroupMemberStatus is one member as the group sees it.
type GroupMemberStatus struct {
	// Name of the member Proxy, in the group's namespace.
	Name string `json:"name"`
	// Zone it was placed in, when spread.
	// +optional
	Zone string `json:"zone,omitempty"`
	// Ready is the member's Ready condition status.
	Ready metav1.ConditionStatus `json:"ready"`
	// Current says the member runs the group's current template.
	Current bool `json:"current"`
	// Endpoint is the member's status.endpoint.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// Address is the member's own address from the entry's pool, when
	// the group holds an address of its own.
	// +optional
	Address string `json:"address,omitempty"`
}

// GroupEgressAddressStatus is where a group's kept egress address is.
type GroupEgressAddressStatus struct {
	// Name is the address's name on the backend.
	Name string `json:"name"`
	// Member is the member whose instance holds it.
	// +optional
	Member string `json:"member,omitempty"`
	// ProviderID is that instance.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
}

// ProxyGroupStatus is the observed group.
type ProxyGroupStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Members are the member Proxies, by index.
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []GroupMemberStatus `json:"members,omitempty"`
	// ReadyMembers counts the members whose Ready is True.
	// +optional
	ReadyMembers int32 `json:"readyMembers,omitempty"`
	// Holder is the member the group's endpoint points at: a ready one,
	// kept while it stays ready.
	// +optional
	Holder string `json:"holder,omitempty"`
	// Address is the group's own address, on an entry with an
	// addressPool: taken from the pool for the group, held by one serving
	// member at a time (VRRP), kept while the group lives. Empty: the
	// group's endpoint is its holder's.
	// +optional
	Address string `json:"address,omitempty"`
	// Endpoint is where the group's clients go: the group's address and
	// port when it has one, the front's endpoint when its provider keeps
	// one (frontProvider), else the holder's endpoint.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// FrontProvider names the provider entry that keeps the group's front:
	// one endpoint of the backend's own over every ready member (on
	// kubernetes, a Service over the member Pods). Empty: the group has
	// none. The front is removed through this entry when the group is
	// deleted or moves to another entry.
	// +optional
	FrontProvider string `json:"frontProvider,omitempty"`
	// EgressIP is the holder's observed egress address; with a front, the
	// address every ready member observed, empty while they differ.
	// +optional
	EgressIP string `json:"egressIP,omitempty"`
	// EgressAddress is where the group's spec.egressAddress is: its name
	// and the member instance the operator last moved it to.
	// +optional
	EgressAddress *GroupEgressAddressStatus `json:"egressAddress,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Conditions of a ProxyGroup. Available and Degraded are for people;
// Reconciling and Stalled for tools that read status the kstatus way.
const (
	// ConditionAvailable is True while a ready member holds the endpoint.
	ConditionAvailable = "Available"
	// ConditionDegraded is True while fewer members are ready than asked.
	ConditionDegraded = "Degraded"
)

// Reasons of a ProxyGroup's conditions.
const (
	// GroupReasonHolderReady: the holder is ready (Available True).
	GroupReasonHolderReady = "HolderReady"
	// GroupReasonNoReadyMember: no member is ready (Available False).
	GroupReasonNoReadyMember = "NoReadyMember"
	// GroupReasonMembersReady: every member is ready (Degraded False).
	GroupReasonMembersReady = "MembersReady"
	// GroupReasonMembersNotReady: some are not (Degraded True).
	GroupReasonMembersNotReady = "MembersNotReady"
	// GroupReasonScaling: members are being made or removed.
	GroupReasonScaling = "Scaling"
	// GroupReasonRolling: a template change is being rolled.
	GroupReasonRolling = "Rolling"
	// GroupReasonMemberFailed: a member failed for good; the roll waits
	// for a change by a person (Stalled True).
	GroupReasonMemberFailed = "MemberFailed"
	// GroupReasonProgressDeadlineExceeded: a member has not become ready
	// and settled within spec.progressDeadlineSeconds; the roll waits
	// (Stalled True, naming it).
	GroupReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// GroupReasonMemberConflict: a Proxy of a member's name is not the
	// group's (Stalled True).
	GroupReasonMemberConflict = "MemberConflict"
	// GroupReasonAddressHeld: on an entry with an addressPool, the
	// group's address is held by a ready member (Available True).
	GroupReasonAddressHeld = "AddressHeld"
	// GroupReasonAddressPending: the group's address, or a member's own,
	// is not bound yet (Available False).
	GroupReasonAddressPending = "AddressPending"
	// GroupReasonAddressConflict: the group's address claim exists and
	// is not the group's (Stalled True).
	GroupReasonAddressConflict = "AddressConflict"
	// GroupReasonEgressAddressFailed: spec.egressAddress cannot be kept
	// (an entry that moves no address, one with an addressPool, an
	// address another owns) (Stalled True).
	GroupReasonEgressAddressFailed = "EgressAddressFailed"
	// GroupReasonFrontServing: the group's front reaches at least one
	// ready member (Available True).
	GroupReasonFrontServing = "FrontServing"
	// GroupReasonFrontFailed: the provider refused to make the group's
	// front (an object of its name that is not this installation's)
	// (Stalled True).
	GroupReasonFrontFailed = "FrontFailed"
)

// ProxyGroup runs spec.members Proxies made from one template, placed
// apart, and points one endpoint at a ready one, moving it when that one
// stops being ready. Its members are ordinary Proxies it owns.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=egress,shortName=pg
// +kubebuilder:printcolumn:name="Members",type=integer,JSONPath=`.spec.members`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyMembers`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Egress IP",type=string,JSONPath=`.status.egressIP`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyGroupSpec   `json:"spec"`
	Status ProxyGroupStatus `json:"status,omitempty"`
}

// ProxyGroupList is a list of ProxyGroups.
// +kubebuilder:object:root=true
type ProxyGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyGroup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProxyGroup{}, &ProxyGroupList{})
}
