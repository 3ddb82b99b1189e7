package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxCloudInitBytes bounds spec.cloudInit: GCE metadata values stop at
// 256 KiB, and a NoCloud seed ISO has no reason to be larger either.
const MaxCloudInitBytes = 262144

// Placement says where the instance runs. What each field means is the
// provider's: a GCE zone or a libvirt host or a Proxmox node for zone; a
// catalogue key for machineType; a catalogue key or an image URL for image.
type Placement struct {
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Zone string `json:"zone,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Region string `json:"region,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	MachineType string `json:"machineType,omitempty"`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Image string `json:"image,omitempty"`
}

// SecretKeySelector names one key of a Secret in the Proxy's namespace.
type SecretKeySelector struct {
	// Name of the Secret, in the Proxy's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key in the Secret's data; defaults to "user-data".
	// +kubebuilder:default=user-data
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// HtpasswdSecretRef names the key of a Secret, in the Proxy's namespace,
// that holds an htpasswd file. Its own type rather than SecretKeySelector:
// the key's default differs.
type HtpasswdSecretRef struct {
	// Name of the Secret, in the Proxy's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key in the Secret's data; defaults to "htpasswd".
	// +kubebuilder:default=htpasswd
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// ClientAuth makes the proxy ask its clients for a user name and password
// (HTTP basic, Proxy-Authorization), besides admitting them by
// allowedSourceRanges: both must pass.
type ClientAuth struct {
	// SecretRef names the Secret, in the Proxy's namespace, and the key in
	// it that holds an htpasswd file: one "user:hash" per line, bcrypt hashes
	// only (htpasswd -B), the format Squid's basic_ncsa_auth reads. Key
	// defaults to "htpasswd".
	SecretRef HtpasswdSecretRef `json:"secretRef"`
}

// Notes on DestinationRule's CEL rules, kept out of its documentation:
//   - The regular expressions write [.] and [*] rather than \. and \*: an
//     escape would need escaping once for the marker and again for CEL.
//   - ::ffff:0:0/96 cannot be named in CEL: cidr() and ip() refuse
//     IPv4-mapped forms, so isCIDR already refuses every range inside it.
//     A range that holds it is /95 or shorter and holds ::fffe:0:0/96, its
//     neighbour, which CEL can name.
//   - The rule-level check counts items, not has(): an untyped client can
//     send "domains: []".
//   - The public-range messageExpression is a raw (backquoted) marker value
//     with a double-quoted CEL string: its text holds an apostrophe.

// DestinationRule is one kind of destination a Proxy's clients may reach.
// A request matches it when its host matches one of Domains, or every
// address of its host lies in CIDRs, and its port is one of Ports. The
// provider entry's policy still applies first: a rule narrows it, never
// widens it.
// +kubebuilder:validation:XValidation:rule="(has(self.domains) && size(self.domains) > 0) || (has(self.cidrs) && size(self.cidrs) > 0)",message="a rule needs domains or cidrs: ports alone do not say where to; leave spec.destinations empty to allow every destination the provider entry allows"
type DestinationRule struct {
	// Domains are host names, lower-case ASCII (an internationalised name
	// in its punycode form, xn--...): "api.example.com" matches that name
	// only; ".example.com" matches example.com and every name under it;
	// "*.example.com" every name under it but not example.com itself. For
	// CONNECT the name in the request line is matched (no TLS
	// interception); an IP-literal target never matches a domain.
	// Refused: a wildcard other than a leading "*.", empty labels (a
	// trailing dot included), labels over 63 characters, names over 253,
	// anything but a-z, 0-9, '-' and '.', labels that start or end with
	// '-', a single label ("localhost", ".com", "*.com": a search-list name
	// or a whole top-level domain) and an all-digit last label (an IP
	// address is not a name: it goes in CIDRs).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=254
	// +kubebuilder:validation:items:XValidation:rule="size(bytes(self)) == size(self)",message="must be ASCII: write an internationalised name in its punycode form, as IDNA encodes it (xn--bcher-kva.de for bücher.de)"
	// +kubebuilder:validation:items:XValidation:rule="!self.matches('[A-Z]')",messageExpression="'must be lower case: write %s'.format([self.lowerAscii()])"
	// +kubebuilder:validation:items:XValidation:rule="size(bytes(self)) != size(self) || !self.matches('[^-a-zA-Z0-9.*]')",messageExpression="isIP(self) ? 'is an IP address, which never matches a domain: list it in cidrs as %s/%d'.format([string(ip(self)), ip(self).family() == 4 ? 32 : 128]) : 'may hold only a-z, 0-9, - and . (a host name, not a URL or host:port: write api.example.com, not https://api.example.com:443/)'"
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('*.') ? !self.substring(2).contains('*') : !self.contains('*')",message="a wildcard is allowed only as a leading *. (every name under it): write *.example.com, or .example.com for example.com and every name under it"
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^([*][.]|[.])?[^.]+([.][^.]+)*$')",message="has an empty label (two dots in a row, a trailing dot, or nothing after the leading . or *.): write api.example.com, .example.com or *.example.com, with no final dot"
	// +kubebuilder:validation:items:XValidation:rule="!self.matches('[^.]{64}')",message="has a label longer than 63 characters, more than DNS allows between two dots"
	// +kubebuilder:validation:items:XValidation:rule="size(self) <= (self.startsWith('.') ? 254 : 253)",message="is longer than a DNS name can be: at most 253 characters, not counting a leading ."
	// +kubebuilder:validation:items:XValidation:rule="!self.matches('(^|[.])-|-($|[.])')",message="has a label that starts or ends with -: a label starts and ends with a letter or digit"
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) || (self.startsWith('*.') ? self.substring(2) : self.startsWith('.') ? self.substring(1) : self) in ['', '*'] || (self.startsWith('*.') ? self.substring(2) : self.startsWith('.') ? self.substring(1) : self).contains('.')",message="needs at least two labels after the optional . or *. (api.example.com, .example.com, *.example.com): a single label is a search-list name such as localhost, or a whole top-level domain"
	// +kubebuilder:validation:items:XValidation:rule="!self.matches('(^|[.])[0-9]+$')",messageExpression="isIP(self) ? 'is an IP address, which never matches a domain: list it in cidrs as %s/%d'.format([string(ip(self)), ip(self).family() == 4 ? 32 : 128]) : 'ends in an all-digit label, which no domain name has: an address goes in cidrs'"
	// +listType=set
	// +optional
	Domains []string `json:"domains,omitempty"`
	// CIDRs are public ranges in canonical form; a name matches when every
	// address it resolves to lies in them, an IP literal when it does.
	// Public: none may overlap (contain or lie in) a private, loopback,
	// link-local, metadata or multicast range; the admin opens those in the
	// provider entry's allowedDestinations, and a Proxy reaches them by
	// domain.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 203.0.113.0/24 or 2001:db8::/32"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="a /0 range is every address, not a narrowing: leave spec.destinations empty to allow every destination the provider entry allows"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || string(cidr(self).masked()) == self",messageExpression="'must be in canonical form (no host bits set, lower case, IPv6 compressed): write %s for the whole range, or %s/%d for one host'.format([string(cidr(self).masked()), string(cidr(self).ip()), cidr(self).ip().family() == 4 ? 32 : 128])"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() == 0 || (['0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16', '224.0.0.0/4', '240.0.0.0/4', '::1/128', '::/96', 'fc00::/7', 'fe80::/10', 'ff00::/8'].all(r, !cidr(r).containsCIDR(self) && !cidr(self).containsCIDR(r)) && !(cidr(self).prefixLength() <= 95 && cidr(self).containsCIDR('::fffe:0:0/96')))",messageExpression=`"must be a public range: it overlaps %s (private, loopback, link-local, metadata or multicast); a provider entry's allowedDestinations opens internal ranges, and a Proxy narrows to them by domain".format([(['0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.168.0.0/16', '224.0.0.0/4', '240.0.0.0/4', '::1/128', '::/96', 'fc00::/7', 'fe80::/10', 'ff00::/8'].filter(r, cidr(r).containsCIDR(self) || cidr(self).containsCIDR(r)) + ['::ffff:0:0/96'])[0]])`
	// +listType=set
	// +optional
	CIDRs []string `json:"cidrs,omitempty"`
	// Ports the rule reaches, for CONNECT and plain requests alike; each
	// must also be one the entry allows (its connectPorts for CONNECT, the
	// safe ports for plain requests). Empty: every port the entry allows.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	// +listType=set
	// +optional
	Ports []int32 `json:"ports,omitempty"`
}

// ProxySpec is what the user asks for.
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="spec.className is immutable: the instance belongs to the installation of that class; create a new Proxy to move",fieldPath=".className"
// +kubebuilder:validation:XValidation:rule="!(has(self.cloudInit) && has(self.cloudInitSecretRef))",message="cloudInit and cloudInitSecretRef are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!has(self.cloudInit) || size(bytes(self.cloudInit)) <= 262144",message="cloudInit must be at most 262144 bytes (256 KiB) of UTF-8",fieldPath=".cloudInit"
type ProxySpec struct {
	// Provider is the name of an entry in the operator's providers config
	// (not a provider type).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.provider is immutable: the instance lives on that provider; create a new Proxy to move"
	Provider string `json:"provider"`

	// ClassName names the operator installation that serves this Proxy, as
	// spec.ingressClassName does for an Ingress: the one started with
	// --proxy-class=<className>. Unset, the Proxy is served by the
	// installation started without --proxy-class. Every other installation
	// leaves the Proxy alone. Immutable (set or unset) after creation.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	ClassName string `json:"className,omitempty"`

	// Placement says where the instance runs; its meaning is the provider's.
	// +optional
	Placement Placement `json:"placement,omitempty"`

	// Port the proxy listens on.
	// +kubebuilder:default=3128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// CloudInit is the instance's user-data. When neither it nor
	// cloudInitSecretRef is set, the operator generates one that installs
	// Squid on port with an ACL from allowedSourceRanges. Providers that run
	// no VM (local, kubernetes) do not use it. At most 256 KiB (262144
	// bytes) of UTF-8.
	// +kubebuilder:validation:MaxLength=262144
	// +optional
	CloudInit string `json:"cloudInit,omitempty"`

	// CloudInitSecretRef takes the user-data from a Secret instead, for
	// user-data that holds credentials.
	// +optional
	CloudInitSecretRef *SecretKeySelector `json:"cloudInitSecretRef,omitempty"`

	// AllowedSourceRanges are the CIDRs admitted to use the proxy. Empty
	// admits only clients on the proxy's own host; the proxy is never open
	// to all. Each is written in canonical form: 10.0.0.1/8 is refused
	// rather than widened to 10.0.0.0/8, more than one host.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.0.0.0/8 or 2001:db8::/32"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="a /0 range would make an open proxy; list the ranges that may use it"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || string(cidr(self).masked()) == self",messageExpression="'must be in canonical form (no host bits set, lower case, IPv6 compressed): write %s for the whole range, or %s/%d for one host'.format([string(cidr(self).masked()), string(cidr(self).ip()), cidr(self).ip().family() == 4 ? 32 : 128])"
	// +listType=set
	// +optional
	AllowedSourceRanges []string `json:"allowedSourceRanges,omitempty"`

	// ClientAuth makes the proxy ask its clients for a user name and
	// password, checked against an htpasswd file in a Secret, besides
	// admitting them by allowedSourceRanges. Empty: no authentication
	// (clients are admitted by allowedSourceRanges alone).
	// +optional
	ClientAuth *ClientAuth `json:"clientAuth,omitempty"`

	// Destinations narrow where the proxy's clients may go: a request must
	// match one of these rules, besides passing the provider entry's
	// destination policy. Empty: any destination the entry's policy allows.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Destinations []DestinationRule `json:"destinations,omitempty"`

	// EgressAddress keeps one egress address for the Proxy through every
	// replacement of its instance, so that a partner can allow-list it:
	// one the operator reserves for this Proxy, or one the user reserved
	// already (name). Which providers keep one, and how:
	// docs/api.md ("A stable egress address"). Absent: each instance
	// egresses from whatever address its backend gives it.
	// +optional
	EgressAddress *EgressAddressSpec `json:"egressAddress,omitempty"`

	// GroupAddress is written by a ProxyGroup on its members on an entry
	// with an addressPool: the group's address, which the members hold
	// one at a time (VRRP; docs/groups.md), and the other members' own
	// addresses. Not for people: a Proxy that no ProxyGroup controls
	// refuses it.
	// +optional
	GroupAddress *MemberGroupAddress `json:"groupAddress,omitempty"`
}

// MemberGroupAddress is a member's part in holding its group's address.
type MemberGroupAddress struct {
	// Address is the group's address with its pool's prefix length (e.g.
	// 192.0.2.100/24); empty while the group waits for it and for its
	// members' own addresses, and the member makes no instance until then.
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self == '' || isCIDR(self)",message="must be an address with its prefix length, such as 192.0.2.100/24"
	// +optional
	Address string `json:"address,omitempty"`
	// Peers are the other members' own addresses.
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MaxLength=39
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be an IP address"
	// +listType=set
	// +optional
	Peers []string `json:"peers,omitempty"`
}

// EgressAddressSpec asks for an egress address that outlives the Proxy's
// instances.
// +kubebuilder:validation:XValidation:rule="!has(self.name) || !has(self.reclaimPolicy) || self.reclaimPolicy == 'Retain'",message="reclaimPolicy Delete applies to an address the operator reserves: an address the user reserved (name) is never deleted; leave reclaimPolicy out"
// +kubebuilder:validation:XValidation:rule="!has(self.address) || (!has(self.name) && !has(self.reclaimPolicy))",message="address picks an address from the entry's addressPool; name and reclaimPolicy are for addresses the backend reserves (gcp)"
type EgressAddressSpec struct {
	// Name is an address the user reserved already (gcp: a regional static
	// address in the instance's region, external or internal as the
	// entry's addressMode). The operator attaches it to the Proxy's
	// instances and never deletes or collects it; another Proxy of this
	// installation using it is refused. Empty: the operator reserves one
	// for this Proxy, named after it.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Name string `json:"name,omitempty"`
	// ReclaimPolicy says what happens to an address the operator reserved
	// when the Proxy is deleted: Delete (the default) releases it; Retain
	// keeps it, labelled with the Proxy it was reserved for and named in
	// an Event, so a new Proxy can take it over by name.
	// +kubebuilder:validation:Enum=Delete;Retain
	// +optional
	ReclaimPolicy string `json:"reclaimPolicy,omitempty"`
	// Address asks for this address from the entry's addressPool (kvm,
	// kvm2, proxmox), e.g. one a partner already allow-lists. It must be in
	// the pool and free; without it the Proxy gets the pool's lowest free
	// address. Every Proxy on an entry with an addressPool gets one, so
	// spec.egressAddress is needed only to pick it.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IPv4 or IPv6 address"
	// +optional
	Address string `json:"address,omitempty"`
}

// Reclaim policies of spec.egressAddress.
const (
	ReclaimDelete = "Delete"
	ReclaimRetain = "Retain"
)

// ProxyPhase is a one-word summary of the Proxy's state; the Ready
// condition has the detail.
// +kubebuilder:validation:Enum=Pending;Provisioning;Running;Failed;Deleting
type ProxyPhase string

const (
	PhasePending      ProxyPhase = "Pending"
	PhaseProvisioning ProxyPhase = "Provisioning"
	PhaseRunning      ProxyPhase = "Running"
	PhaseFailed       ProxyPhase = "Failed"
	PhaseDeleting     ProxyPhase = "Deleting"
)

// AnnotationForceRelease, set to "true" on a Proxy, lets its deletion finish
// without deleting the backend instance: for a provider that is gone for
// good. The abandoned instance IDs are recorded in a Warning event.
const AnnotationForceRelease = "egress.proxy-operator.dev/force-release"

// ConditionReady is the Proxy's summary condition.
const ConditionReady = "Ready"

// ConditionEgressIPObserved says whether status.egressIP is current: True
// when the source confirmed it on the serving instance, False when the
// echo fails (egressIP is then the last confirmed address), Unknown when
// the serving instance has not reported one yet. Absent while nothing was
// ever observed. It does not bear on Ready.
const ConditionEgressIPObserved = "EgressIPObserved"

// Reasons of the EgressIPObserved condition.
const (
	// EgressReasonConfirmed: the source confirmed status.egressIP.
	EgressReasonConfirmed = "Confirmed"
	// EgressReasonEchoFailing: the echo's last answer failed.
	EgressReasonEchoFailing = "EchoFailing"
	// EgressReasonNotReportedYet: the serving instance has not reported
	// its egress address yet.
	EgressReasonNotReportedYet = "NotReportedYet"
)

// kstatus's abnormal-true conditions, derived from Ready's reason
// (docs/api.md): tools that read status the kstatus way (Flux, Argo CD,
// kpt live status, kubectl wait on them) see a Proxy in progress or
// stuck, not merely "Current", while it is not Ready.
const (
	// ConditionReconciling is True while the operator works towards Ready
	// (provisioning, a replacement, a retried backend error).
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True while only a change by a person can help
	// (a permanent failure, a missing Secret, a failed cloud-init).
	ConditionStalled = "Stalled"
)

// Reasons of the Ready condition. docs/api.md explains each.
const (
	// ReasonProvisioning: the instance is being created or is booting.
	ReasonProvisioning = "Provisioning"
	// ReasonRunning: the instance serves at status.endpoint.
	ReasonRunning = "Running"
	// ReasonProxyStarting: the instance runs with an address, and its
	// proxy does not answer yet (it never has on this instance).
	ReasonProxyStarting = "ProxyStarting"
	// ReasonProxyNotAnswering: the instance's proxy answered, then
	// stopped; replaced after the entry's replaceUnhealthyAfter.
	ReasonProxyNotAnswering = "ProxyNotAnswering"
	// ReasonCloudInitFailed: the guest's cloud-init failed and its proxy
	// does not answer; not replaced until the spec or user-data changes.
	ReasonCloudInitFailed = "CloudInitFailed"
	// ReasonReplacing: a spec change is being rolled out to a new instance;
	// the old one serves until the new one runs.
	ReasonReplacing = "Replacing"
	// ReasonInstanceStopped: the instance stopped or terminated and is
	// being brought back.
	ReasonInstanceStopped = "InstanceStopped"
	// ReasonInstanceLost: the instance vanished and is being created again.
	ReasonInstanceLost = "InstanceLost"
	// ReasonQuotaExceeded: the backend refused for capacity or quota; the
	// operator retries with a long backoff.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonBackendError: a transient backend failure; retried with backoff.
	ReasonBackendError = "BackendError"
	// ReasonPermanentFailure: the backend refused the request for good;
	// nothing is retried until the spec changes.
	ReasonPermanentFailure = "PermanentFailure"
	// ReasonProviderNotFound: spec.provider names no configured provider;
	// re-evaluated when the providers config changes.
	ReasonProviderNotFound = "ProviderNotFound"
	// ReasonCloudInitSecretNotFound: cloudInitSecretRef names a Secret or
	// key that does not exist; re-evaluated when the Secret appears.
	ReasonCloudInitSecretNotFound = "CloudInitSecretNotFound"
	// ReasonClientAuthSecretNotFound: clientAuth names a Secret or key that
	// does not exist; re-evaluated when the Secret appears.
	ReasonClientAuthSecretNotFound = "ClientAuthSecretNotFound"
	// ReasonClientAuthInvalid: the clientAuth Secret's htpasswd file cannot
	// be used (a malformed line, a hash that is not bcrypt, no user); the
	// message names the Secret and the line, never its content.
	ReasonClientAuthInvalid = "ClientAuthInvalid"
	// ReasonDeleting: the instance is being deleted with the Proxy.
	ReasonDeleting = "Deleting"
)

// ProxyStatus is what the operator observed.
type ProxyStatus struct {
	// Phase is a one-word summary; see the Ready condition for detail.
	// +optional
	Phase ProxyPhase `json:"phase,omitempty"`
	// ProviderID is the provider's ID of the instance serving this Proxy.
	// It is recorded as soon as Create returns.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// InstanceName is the backend name of that instance. It is derived from
	// the Proxy and the shaping spec, so a spec change that reshapes the
	// instance yields a new name.
	// +optional
	InstanceName string `json:"instanceName,omitempty"`
	// RetiringProviderID is the instance being replaced: it still serves
	// at status.endpoint until the new one runs, then it is superseded.
	// +optional
	RetiringProviderID string `json:"retiringProviderID,omitempty"`
	// RetiringInstanceName is the backend name of the retiring instance, so
	// that a spec reverted during a replacement returns to it instead of
	// replacing it.
	// +optional
	RetiringInstanceName string `json:"retiringInstanceName,omitempty"`
	// SupersededProviderIDs are instances this Proxy no longer wants (a
	// replacement overtaken by another spec change, a retired instance once
	// its successor runs). None of them serves; each is deleted and dropped
	// from the list once the backend says it is gone.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	SupersededProviderIDs []string `json:"supersededProviderIDs,omitempty"`
	// IP of the instance.
	// +optional
	IP string `json:"ip,omitempty"`
	// Endpoint is host:port for clients: the instance's stable name when its
	// provider has one (a Service name for Pods), else its IP.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// EgressIP is the address destinations see when clients go through
	// this Proxy, as observed on the instance serving it (status.egress
	// says how and when; the EgressIPObserved condition whether it is
	// current). Empty until observed: the entry names no echo and the
	// backend does not know it, or the serving instance has not reported.
	// +optional
	EgressIP string `json:"egressIP,omitempty"`
	// Egress is how egressIP was observed.
	// +optional
	Egress *EgressObservation `json:"egress,omitempty"`
	// HoldsGroupAddress, on a member of a ProxyGroup with an address of
	// its own (spec.groupAddress), says whether the serving instance holds
	// the group's address now, as its guest last reported (the members
	// elect the holder among themselves through VRRP). Unset when the
	// instance does not serve or its guest does not say.
	// +optional
	HoldsGroupAddress *bool `json:"holdsGroupAddress,omitempty"`
	// EgressAddress is the address kept for the Proxy (spec.egressAddress)
	// and the instance the operator last gave it to; a serving instance
	// that is not that one gets it moved to it.
	// +optional
	EgressAddress *EgressAddressStatus `json:"egressAddress,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// PermanentFailure, when set, holds back retries after a permanent
	// failure until what it was seen under changes: the generation, the
	// instance name (the shape, including the resolved cloud-init), the
	// provider's configuration revision, or the provider's health turning
	// Healthy after Time. It lives in the status so that a restart or a
	// leader change does not retry every latched Proxy at once.
	// +optional
	PermanentFailure *PermanentFailure `json:"permanentFailure,omitempty"`
	// Autoheals counts the instances replaced because their proxy stopped
	// answering (the entry's autoheal); each one gives the next instance a
	// new name.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Autoheals int32 `json:"autoheals,omitempty"`
	// Conditions: Ready, with the reasons listed in docs/api.md.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EgressAddressStatus is where a Proxy's kept egress address is.
type EgressAddressStatus struct {
	// Name is the address's name on the backend (gcp), or the IPAddress
	// object that holds the Proxy's address from its entry's addressPool
	// (in the Proxy's namespace, named as its IPAddressClaim).
	Name string `json:"name"`
	// Address is the address itself, for an address from a pool.
	// +optional
	Address string `json:"address,omitempty"`
	// Pool is the IPAM pool the address came from, as
	// <kind>.<apiGroup>/<name>.
	// +optional
	Pool string `json:"pool,omitempty"`
	// ProviderID is the instance that holds it.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
}

// EgressObservation is how a Proxy's egress address was observed.
type EgressObservation struct {
	// Source: Backend (the backend gives the instance that address, as a
	// GCE external NAT IP) or Echo (the entry's egressIPEcho answered a
	// request the instance sent through its own proxy).
	// +kubebuilder:validation:Enum=Backend;Echo
	Source string `json:"source"`
	// LastConfirmed is when the source last said so (for an echo, the
	// guest's clock).
	// +optional
	LastConfirmed *metav1.Time `json:"lastConfirmed,omitempty"`
	// ProviderID is the instance it was observed on.
	ProviderID string `json:"providerID"`
}

// PermanentFailure is what a permanent failure was seen under.
type PermanentFailure struct {
	// ObservedGeneration is the Proxy's generation at the failure.
	ObservedGeneration int64 `json:"observedGeneration"`
	// InstanceName is the instance name the failing request derived.
	InstanceName string `json:"instanceName"`
	// ProviderRevision is the revision of the provider entry's settings.
	// +optional
	ProviderRevision string `json:"providerRevision,omitempty"`
	// Time is when the failure was recorded.
	Time metav1.Time `json:"time"`
}

// Proxy is an egress HTTP proxy run by one of the operator's providers.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=egress
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Egress IP",type=string,JSONPath=`.status.egressIP`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Proxy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxySpec   `json:"spec"`
	Status ProxyStatus `json:"status,omitempty"`
}

// ProxyList is a list of Proxies.
// +kubebuilder:object:root=true
type ProxyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Proxy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Proxy{}, &ProxyList{})
}
