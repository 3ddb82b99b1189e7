// Package provider is the contract between the Proxy reconciler and the
// backends that run egress proxies. It names no backend: providers import it,
// never the other way round. docs/provider-contract.md states the rules.
package provider

import (
	"context"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// Provider is the lifecycle seam every backend implements. It holds
// lifecycle verbs only; scheduling, pacing and health live elsewhere so that
// decorators (spans, metrics) wrap exactly four methods.
//
// Every method honours ctx: when it is cancelled the call returns promptly
// with an error whose class is Transient (the method boundary ends a call
// whose ctx had ended before it began, so a provider need not check first). No method holds its caller longer
// than CallBound while the backend answers: work that takes longer runs in
// the provider, keyed by instance name (internal/provider/inflight), and is
// reported through Create and Get. The provider keeps nothing that a
// restart may not lose: what it needs to go on is in the backend.
type Provider interface {
	// Create makes the instance named req.Name, or adopts it when it already
	// exists and carries this installation's mark with req.UID (an instance
	// with another UID, or with no mark, is ErrPermanent). A Stopped instance
	// that is adopted is started again, and an unfinished one (a create that
	// a restart or a failed step interrupted) is resumed from what the
	// backend shows. Create returns within CallBound: once the instance
	// runs, or once the backend accepted it, or with the slow steps still
	// running in the provider; then the instance reads Provisioning with
	// Progress, and a second Create joins the steps in flight. A step that
	// failed is the next Create's (or Get's) error, with its class, once.
	// Create is idempotent by name, and so is every step, so a crash at any
	// point neither duplicates nor leaks.
	Create(ctx context.Context, req CreateRequest) (Instance, error)
	// Get reads the instance by the ID Create returned. An instance that is
	// gone, or that no longer carries our mark, is ErrNotFound. While a
	// step of its create runs, Get reports Provisioning with the step's
	// Progress (even before the backend shows the instance); a step that
	// failed is Get's error, with its class, once. An unfinished instance
	// that no step is advancing (after a restart, or after the failure was
	// reported) reads Stopped, so that the reconciler calls Create, which
	// resumes it.
	Get(ctx context.Context, id string) (Instance, error)
	// Delete removes the instance and its secondary resources. It first
	// cancels the steps of the instance's create in flight and waits for
	// them to stop (bounded), so that none re-creates what it removes.
	// Deleting something already gone succeeds. Delete may return before
	// the backend finished; the caller then polls Get until ErrNotFound.
	Delete(ctx context.Context, id string) error
	// ListByTag returns every instance carrying the managed mark and this
	// installation's identity. Only ID, UID and CreatedAt need be set: the
	// garbage collector reads nothing else, so providers skip per-instance
	// state or address calls here.
	ListByTag(ctx context.Context) ([]Instance, error)
}

// Checker is implemented by providers that can report the reachability of
// their backend. It never returns an error: what went wrong is the result.
type Checker interface {
	Check(ctx context.Context) CheckResult
}

// State is the lifecycle state of an instance as the reconciler sees it.
type State string

const (
	// StateProvisioning: the instance exists but does not serve yet (booting,
	// no address yet, being created).
	StateProvisioning State = "Provisioning"
	// StateRunning: the instance serves and IP is set.
	StateRunning State = "Running"
	// StateStopped: the instance exists and can be started again; Create
	// adopts and starts it. An instance whose create was interrupted and
	// that nothing advances reads Stopped too: Create resumes it.
	StateStopped State = "Stopped"
	// StateTerminated: the instance ended for good but is still recorded by
	// the backend (a Pod that failed, a VM terminated); it must be deleted
	// and created anew.
	StateTerminated State = "Terminated"
)

// Instance is what a provider reports about one backend instance.
type Instance struct {
	// ID is the provider's own key, opaque to the reconciler. It round-trips:
	// Get and Delete accept exactly what Create and ListByTag return.
	ID string
	// UID is the owning Proxy's UID as read back from the backend's mark.
	UID string
	// State is empty in ListByTag results, where it is not read.
	State State
	// IP is the instance's address; set when State is Running.
	IP string
	// Serving says whether the proxy on a Running instance answers, from
	// the source the provider's profile names on its serving-signal axis;
	// ServingUnknown from a provider that has none. Ready needs a Running
	// instance with an address whose proxy is not known not to answer.
	Serving Serving
	// ServingDetail says, in a few words and without a secret, why the
	// proxy does not answer yet ("the Squid container's readiness probe
	// fails", "cloud-init running"); shown in the Ready condition.
	ServingDetail string
	// LastAnswered, from a signal that knows it, is when the proxy last
	// answered; zero when it never has (or the signal cannot tell). It
	// tells "stopped answering" from "not answering yet".
	LastAnswered time.Time
	// SetupError, from a signal that knows it, is the guest's setup
	// failure in one line (cloud-init's first error): the proxy does not
	// answer and will not without a change, so it is not replaced in a
	// loop. Never a secret (a guest's error line names modules and files).
	SetupError string
	// Egress is the address destinations see, from the source the
	// provider's profile names on its egress-ip axis; zero when it has
	// none, or none yet.
	Egress Egress
	// HoldsGroupAddress, from a signal that knows it, says whether the
	// instance holds its group's address now (CreateRequest.GroupAddress:
	// the members elect the holder among themselves); nil when the signal
	// does not say (no group address, or a guest of before).
	HoldsGroupAddress *bool
	// Host, when set, is a stable name clients should use instead of IP
	// (a Service's DNS name for Pods, whose IPs change on replacement).
	// status.endpoint is Host:port then, and status.ip stays the IP.
	Host string
	// Progress, for a Provisioning instance, says in a few words what the
	// backend is doing ("downloading image debian-12: 212/400 MiB", "clone
	// task running"); for a Stopped one whose create was interrupted, that
	// Create resumes it. The reconciler shows it in the Ready condition's
	// message. It never holds a secret, and stays short (the in-flight
	// table clips it to inflight.MaxProgress bytes).
	Progress string
	// CreatedAt is when the backend made the instance; the zero time means
	// "age unknown", and the garbage collector never treats that as old.
	CreatedAt time.Time
}

// Serving is what a provider knows of whether the proxy on an instance
// answers (docs/provider-contract.md, "The serving signal").
type Serving string

const (
	// ServingUnknown: the provider has no signal (serving-signal: none);
	// Ready follows the instance's state and address alone.
	ServingUnknown Serving = ""
	// ServingAnswering: the signal says the proxy answers.
	ServingAnswering Serving = "Answering"
	// ServingNotAnswering: the signal says it does not (yet), or the
	// source that would say so has said nothing yet.
	ServingNotAnswering Serving = "NotAnswering"
)

// Egress is what a provider knows of the address an instance's proxy
// egresses from (docs/provider-contract.md, "The egress address").
type Egress struct {
	// IP is the address, canonical; "" when none was ever confirmed.
	IP string
	// Source says how it is known.
	Source EgressSource
	// Confirmed is when the source last said so (for an echo, the guest's
	// clock when its answer arrived).
	Confirmed time.Time
	// Error, when set, is why the source's last answer failed, in a few
	// words and without a secret; IP then is the last confirmed address.
	// From the backend source it is a note beside an address that stands
	// (an echo that saw another).
	Error string
}

// Awaited says the source was asked and has not answered yet (Source set,
// neither IP nor Error): the first ask of an echo the operator makes
// itself. The reconciler reads the instance again soon rather than at its
// running resync, so the address shows seconds after Ready.
func (e Egress) Awaited() bool { return e.Source != "" && e.IP == "" && e.Error == "" }

// EgressSource says how an instance's egress address is known.
type EgressSource string

const (
	// EgressFromBackend: the backend gives the instance that address (a
	// GCE external NAT IP) and reports it.
	EgressFromBackend EgressSource = "Backend"
	// EgressFromEcho: the entry's egressIPEcho answered a request the
	// instance sent through its own proxy.
	EgressFromEcho EgressSource = "Echo"
)

// Placement says where an instance runs; each provider defines what the
// fields mean (a GCE zone, a libvirt host, a Proxmox node) and rejects what
// it cannot honour with ErrPermanent.
type Placement struct {
	Zone        string `json:"zone,omitempty"`
	Region      string `json:"region,omitempty"`
	MachineType string `json:"machineType,omitempty"`
	Image       string `json:"image,omitempty"`
}

// CreateRequest carries everything a provider needs to make one instance.
type CreateRequest struct {
	// Name is the instance name, derived by InstanceName; it is valid for
	// every backend's naming rules and is the key of Create's idempotency.
	Name string
	// Namespace, ProxyName and UID identify the owning Proxy.
	Namespace string
	ProxyName string
	UID       string
	// Port is the TCP port the proxy listens on.
	Port int32
	// AllowedSourceRanges are the CIDRs admitted to use the proxy. Empty
	// means only clients on the proxy's own host.
	AllowedSourceRanges []string
	// Destinations are the Proxy's destination rules (spec.destinations);
	// empty: any destination the entry's policy allows. A provider applies
	// them with its entry's policy through egress.Policy.ForRequest.
	Destinations []egress.DestinationRule
	// ClientAuth is the htpasswd file of the Proxy's clientAuth (bcrypt
	// entries, checked by clientauth.Parse); empty: no authentication. It
	// is redacted wherever it is printed.
	ClientAuth Sensitive
	// CloudInit is the user-data; it is redacted wherever it is printed.
	CloudInit Sensitive
	Placement Placement
	// EgressAddress, when set, asks for an egress address that outlives the
	// instance (spec.egressAddress); nil: whatever the backend gives each
	// instance. A provider that cannot keep one refuses with ErrPermanent
	// naming spec.egressAddress.
	EgressAddress *EgressAddress
	// StaticAddress, when set, is the address the instance's NIC takes
	// instead of asking DHCP: the Proxy's address from its entry's
	// addressPool, which outlives its instances. A provider whose profile
	// has no static addresses never gets one (the registry refuses an
	// addressPool on its entries).
	StaticAddress *StaticAddress
	// GroupAddress, when set, makes the instance hold its group's one
	// address in turn with the group's other members; nil: the instance
	// is no group member, or its group's address is kept otherwise. A
	// provider that cannot hold one refuses with ErrPermanent.
	GroupAddress *GroupAddress
	// Group, when set, is the ProxyGroup the instance is a member of. A
	// GroupFronter marks the instance with it, so that the group's front
	// selects it, and places the group's members apart where it can; any
	// other provider ignores it. It is no part of the instance's shape:
	// an instance's group never changes.
	Group *GroupRef
}

// CheckResult is the outcome of one health check.
type CheckResult struct {
	Healthy bool
	// Reason is a CamelCase word from the provider's documented list.
	Reason string
	// Message is for humans; it never holds credentials.
	Message string
	// Target names what was checked (a host, a project, "listeners").
	Target string
	// Address is where the target was reached.
	Address string
	// Details holds what the check learned (versions, free capacity).
	Details map[string]string
}

// Common check reasons; providers may add their own.
const (
	ReasonHealthy      = "Healthy"
	ReasonUnreachable  = "Unreachable"
	ReasonTimeout      = "Timeout"
	ReasonUnauthorized = "Unauthorized"
	ReasonForbidden    = "Forbidden"
	ReasonAPIError     = "APIError"
	ReasonDegraded     = "Degraded"
)

// Options are what every provider is constructed with, whatever its type.
type Options struct {
	// InstallationID is written as MarkInstallation on every instance and
	// filters ListByTag and adoption.
	InstallationID string
	// OperatorNamespace is the namespace the operator's Pods run in; ""
	// when it runs outside a cluster. The kubernetes provider's
	// NetworkPolicy admits the operator's Pods from there to ask the
	// egress-IP echo through a proxy Pod.
	OperatorNamespace string
}
