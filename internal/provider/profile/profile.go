// Package profile is the vocabulary a provider type declares itself in:
// its pick on each axis of docs/provider-contract.md section 3, and the
// rows users compare between types. Each provider package's descriptor
// carries its Profile (internal/provider/descriptor); docs/providers.md is
// generated from them (hack/providers-doc).
package profile

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Profile is what a provider type declares about itself. Every provider
// package declares one (a func Profile, which its descriptor carries), so
// docs/providers.md cannot drift from the code; the registry's tests check
// the parts that can be read off the code (Checker and SecondaryLister
// presence, the states a package produces, its check reasons).
//
// Axes with a closed vocabulary are typed, so a misspelt profile does not
// compile; Validate catches a value converted from an arbitrary string.
// Prose is free text (Markdown inline code allowed, no line breaks).
type Profile struct {
	Readiness Choice[Readiness]
	// ServingSignal is where Get's Instance.Serving comes from.
	ServingSignal Choice[ServingSignal]
	// EgressIP is where Get's Instance.Egress comes from.
	EgressIP     Choice[EgressIP]
	CreateReturn Choice[CreateReturn]
	DeleteReturn Choice[DeleteReturn]
	IPSource     Choice[IPSource]
	// StaticAddress is whether the provider puts CreateRequest.StaticAddress
	// (an entry's addressPool) on its instances.
	StaticAddress      Choice[StaticAddress]
	GCMark             Choice[GCMark]
	CreatedAt          Choice[CreatedAt]
	ListPartial        Choice[ListPartial]
	Quota              Choice[Quota]
	NotFound           Choice[NotFound]
	PrimaryKey         Choice[PrimaryKey]
	ProvisioningState  Choice[ProvisioningState]
	AsyncOps           Choice[AsyncOps]
	SecondaryResources Choice[SecondaryResources]
	Credentials        Choice[Credentials]
	ClientKind         Choice[ClientKind]
	Timeouts           Choice[Timeouts]
	Logging            Choice[Logging]
	ChildSpans         Choice[ChildSpans]
	// BackendTest is the contract's backend-test axis: how the provider is
	// tested against its real backend on this machine (prose; "none" when
	// it is not).
	BackendTest string

	// Placement says what each CreateRequest.Placement field means here.
	Placement PlacementUse
	// CloudInit is how CreateRequest.CloudInit (or the generated Squid
	// cloud-config) reaches the instance.
	CloudInit Choice[CloudInitDelivery]
	// Port is how CreateRequest.Port (the Proxy's spec.port) is used.
	Port string
	// States are the states Get and Create can report, in the contract's
	// order (Provisioning, Running, Stopped, Terminated).
	States []provider.State
	// Check describes the optional Checker.
	Check CheckUse
	// CredentialRotation is what happens when the credentials change.
	CredentialRotation string
	// TestedAgainst lists what the package's tests run the provider
	// against (doubles and real backends).
	TestedAgainst string
}

// Choice is a provider's pick on one axis: one or more values from the
// axis's vocabulary (several when parts of the provider differ, as a cloud
// whose instances carry labels and whose firewall rules carry a written
// mark), and optional prose saying what it means for this provider.
type Choice[V ~string] struct {
	Values []V
	Detail string
}

// Is picks values on an axis; Note adds the prose.
func Is[V ~string](v V, more ...V) Choice[V] {
	return Choice[V]{Values: append([]V{v}, more...)}
}

// Note returns the choice with its prose set.
func (c Choice[V]) Note(detail string) Choice[V] {
	c.Detail = detail
	return c
}

// strings returns the choice's values as strings.
func (c Choice[V]) strings() []string {
	out := make([]string, len(c.Values))
	for i, v := range c.Values {
		out[i] = string(v)
	}
	return out
}

// PlacementUse is what each placement field means for a provider ("not
// used" when it ignores one, "refused" when it rejects any value).
type PlacementUse struct {
	Zone, Region, MachineType, Image string
}

// CheckUse describes a provider's health check.
type CheckUse struct {
	// Implemented says the provider implements Checker.
	Implemented bool
	// Probes is what one Check reads (prose).
	Probes string
	// Reasons are the CheckResult reasons it can give, Healthy first.
	Reasons []string
}

// The axes' vocabularies (docs/provider-contract.md section 3).
type (
	Readiness          string
	ServingSignal      string
	EgressIP           string
	CreateReturn       string
	DeleteReturn       string
	IPSource           string
	StaticAddress      string
	GCMark             string
	CreatedAt          string
	ListPartial        string
	Quota              string
	NotFound           string
	PrimaryKey         string
	ProvisioningState  string
	AsyncOps           string
	SecondaryResources string
	Credentials        string
	ClientKind         string
	Timeouts           string
	Logging            string
	ChildSpans         string
	CloudInitDelivery  string
)

const (
	ReadinessImmediate          Readiness = "immediate"
	ReadinessProvisioningWindow Readiness = "provisioning-window"

	// ServingListener: the proxy is the provider's own listener.
	ServingListener ServingSignal = "listener"
	// ServingReadinessProbe: the kubelet's readiness probe of the proxy's
	// container, read as the Pod's Ready condition.
	ServingReadinessProbe ServingSignal = "readiness-probe"
	// ServingGuestAgent: a reporter in the guest, read through the QEMU
	// guest agent.
	ServingGuestAgent ServingSignal = "guest-agent"
	// ServingGuestAttributes: a reporter in the guest publishes a GCE
	// guest attribute.
	ServingGuestAttributes ServingSignal = "guest-attributes"
	// ServingNone: no signal yet; Ready follows the state and address.
	ServingNone ServingSignal = "none"

	// EgressIPBackend: the backend gives the instance the address its
	// packets leave with, and reports it.
	EgressIPBackend EgressIP = "backend"
	// EgressIPEcho: the entry's egressIPEcho, asked through the proxy by
	// the guest's reporter and published with the serving signal.
	EgressIPEcho EgressIP = "echo"
	// EgressIPNone: not observed.
	EgressIPNone EgressIP = "none"

	CreateReturnSubmit     CreateReturn = "submit"
	CreateReturnBackground CreateReturn = "background"
	CreateReturnBlocking   CreateReturn = "blocking"

	DeleteReturnReturnsEarly DeleteReturn = "returns-early"
	DeleteReturnWaits        DeleteReturn = "waits"

	IPSourceAssignedAtCreate IPSource = "assigned-at-create"
	IPSourceDiscovered       IPSource = "discovered"

	// StaticAddressPool: the provider renders CreateRequest.StaticAddress
	// into the instance's network configuration, and Get reports it as
	// the instance's address; the type's entries may have an addressPool.
	StaticAddressPool StaticAddress = "pool"
	// StaticAddressNone: the backend gives the address; an entry of the
	// type has no addressPool.
	StaticAddressNone StaticAddress = "none"

	GCMarkNativeLabels    GCMark = "native-labels"
	GCMarkWrittenMetadata GCMark = "written-metadata"

	CreatedAtBackendTimestamp CreatedAt = "backend-timestamp"
	CreatedAtWrittenAtCreate  CreatedAt = "written-at-create"

	ListPartialFailWhole       ListPartial = "fail-whole"
	ListPartialOmitUnreachable ListPartial = "omit-unreachable"
	// ListPartialNotApplicable is for a provider whose listing has no
	// parts that can fail apart (an in-process table).
	ListPartialNotApplicable ListPartial = "n/a"

	QuotaDetected Quota = "detected"
	QuotaAbsent   Quota = "absent"

	NotFoundStatus404   NotFound = "status-404"
	NotFoundErrorCode   NotFound = "error-code"
	NotFoundListAndMiss NotFound = "list-and-miss"

	PrimaryKeyNameIsKey   PrimaryKey = "name-is-key"
	PrimaryKeyAllocatedID PrimaryKey = "allocated-id"

	ProvisioningStateNative       ProvisioningState = "native"
	ProvisioningStateCreateBlocks ProvisioningState = "create-blocks"

	AsyncOpsNone       AsyncOps = "none"
	AsyncOpsTaskHandle AsyncOps = "task-handle"

	SecondaryResourcesNone     SecondaryResources = "none"
	SecondaryResourcesCascade  SecondaryResources = "cascade"
	SecondaryResourcesExplicit SecondaryResources = "explicit"

	CredentialsWorkloadIdentity Credentials = "workload-identity"
	CredentialsEnvironment      Credentials = "environment"
	CredentialsMountedFiles     Credentials = "mounted-files"
	// CredentialsNone is for a provider that needs none (in-process).
	CredentialsNone Credentials = "none"

	ClientKindVendorSDK  ClientKind = "vendor-sdk"
	ClientKindRPCOverSSH ClientKind = "rpc-over-ssh"
	ClientKindThinClient ClientKind = "thin-client"
	ClientKindInProcess  ClientKind = "in-process"

	TimeoutsCtxOnly Timeouts = "ctx-only"
	TimeoutsPerCall Timeouts = "per-call"

	LoggingTiered Logging = "tiered"

	ChildSpansTransportWrapper   ChildSpans = "transport-wrapper"
	ChildSpansSDKInstrumentation ChildSpans = "sdk-instrumentation"
	ChildSpansSpanDecorator      ChildSpans = "span-decorator"
	// ChildSpansNone is for a provider that makes no backend calls.
	ChildSpansNone ChildSpans = "none"

	// CloudInitIgnored: the instance runs no cloud-init; the user-data
	// is never read.
	CloudInitIgnored CloudInitDelivery = "ignored"
	// CloudInitNoCloudSeed: a NoCloud seed ISO (internal/provider/nocloud)
	// attached to the VM as a CD-ROM.
	CloudInitNoCloudSeed CloudInitDelivery = "nocloud-seed-iso"
	// CloudInitInstanceMetadata: the backend's instance metadata
	// (`user-data` key), read by the guest's cloud-init datasource.
	CloudInitInstanceMetadata CloudInitDelivery = "instance-metadata"
)

// vocabulary lists every value of every axis, for Validate and for the
// generated page's legend. The order is the contract's.
var vocabulary = map[string][]string{
	"readiness": {string(ReadinessImmediate), string(ReadinessProvisioningWindow)},
	"serving-signal": {string(ServingListener), string(ServingReadinessProbe), string(ServingGuestAgent),
		string(ServingGuestAttributes), string(ServingNone)},
	"egress-ip":           {string(EgressIPBackend), string(EgressIPEcho), string(EgressIPNone)},
	"create-return":       {string(CreateReturnSubmit), string(CreateReturnBackground), string(CreateReturnBlocking)},
	"delete-return":       {string(DeleteReturnReturnsEarly), string(DeleteReturnWaits)},
	"ip-source":           {string(IPSourceAssignedAtCreate), string(IPSourceDiscovered)},
	"static-address":      {string(StaticAddressPool), string(StaticAddressNone)},
	"gc-mark":             {string(GCMarkNativeLabels), string(GCMarkWrittenMetadata)},
	"created-at":          {string(CreatedAtBackendTimestamp), string(CreatedAtWrittenAtCreate)},
	"list-partial":        {string(ListPartialFailWhole), string(ListPartialOmitUnreachable), string(ListPartialNotApplicable)},
	"quota":               {string(QuotaDetected), string(QuotaAbsent)},
	"not-found":           {string(NotFoundStatus404), string(NotFoundErrorCode), string(NotFoundListAndMiss)},
	"primary-key":         {string(PrimaryKeyNameIsKey), string(PrimaryKeyAllocatedID)},
	"provisioning-state":  {string(ProvisioningStateNative), string(ProvisioningStateCreateBlocks)},
	"async-ops":           {string(AsyncOpsNone), string(AsyncOpsTaskHandle)},
	"secondary-resources": {string(SecondaryResourcesNone), string(SecondaryResourcesCascade), string(SecondaryResourcesExplicit)},
	"credentials":         {string(CredentialsWorkloadIdentity), string(CredentialsEnvironment), string(CredentialsMountedFiles), string(CredentialsNone)},
	"client-kind":         {string(ClientKindVendorSDK), string(ClientKindRPCOverSSH), string(ClientKindThinClient), string(ClientKindInProcess)},
	"timeouts":            {string(TimeoutsCtxOnly), string(TimeoutsPerCall)},
	"logging":             {string(LoggingTiered)},
	"child-spans":         {string(ChildSpansTransportWrapper), string(ChildSpansSDKInstrumentation), string(ChildSpansSpanDecorator), string(ChildSpansNone)},
	"cloud-init":          {string(CloudInitIgnored), string(CloudInitNoCloudSeed), string(CloudInitInstanceMetadata)},
}

// Vocabulary returns the values an axis (a row name of Rows) allows, nil
// for a prose row.
func Vocabulary(axis string) []string { return append([]string(nil), vocabulary[axis]...) }

// Row is one row of the providers page for one provider: Values
// from the axis's vocabulary (none for a prose row), Detail the prose.
type Row struct {
	// Name is the row's name: the contract's axis name, or the compared
	// row's (`placement.zone`, `states`, ...).
	Name string
	// Axis says the row is a contract axis (section 3), not a compared row.
	Axis   bool
	Values []string
	Detail string
}

// Rows returns the profile as the page's rows, in the page's order: the
// contract's axes, then the compared rows.
func (p Profile) Rows() []Row {
	axis := func(name string, values []string, detail string) Row {
		return Row{Name: name, Axis: true, Values: values, Detail: detail}
	}
	prose := func(name, detail string) Row { return Row{Name: name, Detail: detail} }
	states := make([]string, len(p.States))
	for i, s := range p.States {
		states[i] = string(s)
	}
	checker := "not implemented"
	if p.Check.Implemented {
		checker = p.Check.Probes
	}
	return []Row{
		axis("readiness", p.Readiness.strings(), p.Readiness.Detail),
		axis("serving-signal", p.ServingSignal.strings(), p.ServingSignal.Detail),
		axis("egress-ip", p.EgressIP.strings(), p.EgressIP.Detail),
		axis("create-return", p.CreateReturn.strings(), p.CreateReturn.Detail),
		axis("delete-return", p.DeleteReturn.strings(), p.DeleteReturn.Detail),
		axis("ip-source", p.IPSource.strings(), p.IPSource.Detail),
		axis("static-address", p.StaticAddress.strings(), p.StaticAddress.Detail),
		axis("gc-mark", p.GCMark.strings(), p.GCMark.Detail),
		axis("created-at", p.CreatedAt.strings(), p.CreatedAt.Detail),
		axis("list-partial", p.ListPartial.strings(), p.ListPartial.Detail),
		axis("quota", p.Quota.strings(), p.Quota.Detail),
		axis("not-found", p.NotFound.strings(), p.NotFound.Detail),
		axis("primary-key", p.PrimaryKey.strings(), p.PrimaryKey.Detail),
		axis("provisioning-state", p.ProvisioningState.strings(), p.ProvisioningState.Detail),
		axis("async-ops", p.AsyncOps.strings(), p.AsyncOps.Detail),
		axis("secondary-resources", p.SecondaryResources.strings(), p.SecondaryResources.Detail),
		axis("credentials", p.Credentials.strings(), p.Credentials.Detail),
		axis("client-kind", p.ClientKind.strings(), p.ClientKind.Detail),
		axis("timeouts", p.Timeouts.strings(), p.Timeouts.Detail),
		axis("logging", p.Logging.strings(), p.Logging.Detail),
		axis("child-spans", p.ChildSpans.strings(), p.ChildSpans.Detail),
		axis("backend-test", nil, p.BackendTest),
		prose("placement.zone", p.Placement.Zone),
		prose("placement.region", p.Placement.Region),
		prose("placement.machineType", p.Placement.MachineType),
		prose("placement.image", p.Placement.Image),
		{Name: "cloud-init", Values: p.CloudInit.strings(), Detail: p.CloudInit.Detail},
		prose("port", p.Port),
		{Name: "states", Values: states},
		prose("health check", checker),
		{Name: "check reasons", Values: p.Check.Reasons},
		prose("credential rotation", p.CredentialRotation),
		prose("tested against", p.TestedAgainst),
	}
}

// Validate reports what is wrong with a profile: an axis with no
// value, a repeated value or one outside its vocabulary, an empty prose
// row, a state outside the contract's, check reasons without Healthy
// first, a line break in any text (it would break the page's table).
func (p Profile) Validate() error {
	var problems []string
	for _, r := range p.Rows() {
		if strings.ContainsAny(r.Detail, "\r\n") {
			problems = append(problems, r.Name+": a line break in the prose")
		}
		allowed, typed := vocabulary[r.Name]
		switch {
		case typed:
			if len(r.Values) == 0 {
				problems = append(problems, r.Name+": no value")
			}
			seen := map[string]bool{}
			for _, v := range r.Values {
				if !slices.Contains(allowed, v) {
					problems = append(problems, fmt.Sprintf("%s: %q is not one of %s", r.Name, v, strings.Join(allowed, ", ")))
				}
				if seen[v] {
					problems = append(problems, fmt.Sprintf("%s: %q twice", r.Name, v))
				}
				seen[v] = true
			}
		case r.Name == "states" || r.Name == "check reasons":
		case r.Detail == "":
			problems = append(problems, r.Name+": no text")
		}
	}
	if len(p.States) == 0 {
		problems = append(problems, "states: none")
	}
	order := []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateStopped, provider.StateTerminated}
	last := -1
	for _, s := range p.States {
		i := slices.Index(order, s)
		switch {
		case i < 0:
			problems = append(problems, fmt.Sprintf("states: %q is not a contract state", s))
		case i <= last:
			problems = append(problems, fmt.Sprintf("states: %q out of the contract's order, or twice", s))
		default:
			last = i
		}
	}
	if p.Check.Implemented != (len(p.Check.Reasons) > 0) {
		problems = append(problems, "check reasons: given exactly when a Checker is implemented")
	}
	if len(p.Check.Reasons) > 0 && p.Check.Reasons[0] != provider.ReasonHealthy {
		problems = append(problems, "check reasons: Healthy first")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
