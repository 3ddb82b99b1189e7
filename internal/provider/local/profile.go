package local

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// Profile is the local provider's profile on the contract's axes and the
// compared rows (docs/providers.md is generated from it: make
// providers-doc).
func Profile() profile.Profile {
	return profile.Profile{
		Readiness:          profile.Is(profile.ReadinessImmediate).Note("serves as soon as its listener is open"),
		ServingSignal:      profile.Is(profile.ServingListener).Note("its own listener: Running while it accepts"),
		EgressIP:           profile.Is(profile.EgressIPEcho).Note("the entry's `egressIPEcho`, asked from the operator's host (its proxies dial from there) once a minute, one answer for every instance; none without it"),
		CreateReturn:       profile.Is(profile.CreateReturnBlocking).Note("returns Running: it only opens a listener, well within `CallBound`"),
		DeleteReturn:       profile.Is(profile.DeleteReturnWaits).Note("the listener is closed and its connections ended before Delete returns"),
		IPSource:           profile.Is(profile.IPSourceAssignedAtCreate).Note("the next free address of `bindCIDR` (inside 127.0.0.0/8)"),
		StaticAddress:      profile.Is(profile.StaticAddressNone).Note("the next free address of `bindCIDR`"),
		GCMark:             profile.Is(profile.GCMarkWrittenMetadata).Note("the marks are kept with the instance, in memory"),
		CreatedAt:          profile.Is(profile.CreatedAtWrittenAtCreate),
		ListPartial:        profile.Is(profile.ListPartialNotApplicable).Note("one in-process table"),
		Quota:              profile.Is(profile.QuotaDetected).Note("an exhausted `bindCIDR` is `ErrQuotaExceeded`"),
		NotFound:           profile.Is(profile.NotFoundListAndMiss).Note("a name missing from the table"),
		PrimaryKey:         profile.Is(profile.PrimaryKeyNameIsKey).Note("`instances/<name>`"),
		ProvisioningState:  profile.Is(profile.ProvisioningStateCreateBlocks),
		AsyncOps:           profile.Is(profile.AsyncOpsNone),
		SecondaryResources: profile.Is(profile.SecondaryResourcesNone).Note("no `SecondaryLister`; the conformance case for secondaries skips"),
		Credentials:        profile.Is(profile.CredentialsNone),
		ClientKind:         profile.Is(profile.ClientKindInProcess),
		Timeouts:           profile.Is(profile.TimeoutsCtxOnly).Note("Check bounds each listener's dial to 2 s"),
		Logging:            profile.Is(profile.LoggingTiered).Note("V(1) outcomes, V(2) addresses, ranges and upstream failures"),
		ChildSpans:         profile.Is(profile.ChildSpansNone).Note("no backend calls; the registry's decorator spans each call"),
		BackendTest:        "itself: real listeners on loopback",

		Placement: profile.PlacementUse{
			Zone:        "not used",
			Region:      "not used",
			MachineType: "not used",
			Image:       "not used",
		},
		CloudInit: profile.Is(profile.CloudInitIgnored).Note("the operator's process serves the proxy itself; nothing runs cloud-init"),
		Port:      "the listener's port on the instance's own loopback address",
		States:    []provider.State{provider.StateRunning, provider.StateStopped},
		Check: profile.CheckUse{
			Implemented: true,
			Probes:      "that `bindCIDR` can be bound and that every instance's listener accepts a connection",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonDegraded, provider.ReasonUnreachable,
				provider.ReasonTimeout, provider.ReasonAPIError},
		},
		CredentialRotation: "n/a: no credentials",
		TestedAgainst:      "the conformance suite over real loopback listeners (the slow-step and restart cases skip: instances live in the operator's process); the operator's tests on envtest (`internal/operator`) and `make demo`",
	}
}
