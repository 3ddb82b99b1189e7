package local

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"

// Profile is the local provider's profile on the contract's axes and the
// compared rows (docs/providers.md is generated from it: make
// providers-doc).
func Profile() provider.Profile {
	return provider.Profile{
		Types: []string{Type},

		Readiness:          provider.Is(provider.ReadinessImmediate).Note("serves as soon as its listener is open"),
		CreateReturn:       provider.Is(provider.CreateReturnBlocking).Note("returns Running: it only opens a listener, well within `CallBound`"),
		DeleteReturn:       provider.Is(provider.DeleteReturnWaits).Note("the listener is closed and its connections ended before Delete returns"),
		IPSource:           provider.Is(provider.IPSourceAssignedAtCreate).Note("the next free address of `bindCIDR` (inside 127.0.0.0/8)"),
		GCMark:             provider.Is(provider.GCMarkWrittenMetadata).Note("the marks are kept with the instance, in memory"),
		CreatedAt:          provider.Is(provider.CreatedAtWrittenAtCreate),
		ListPartial:        provider.Is(provider.ListPartialNotApplicable).Note("one in-process table"),
		Quota:              provider.Is(provider.QuotaDetected).Note("an exhausted `bindCIDR` is `ErrQuotaExceeded`"),
		NotFound:           provider.Is(provider.NotFoundListAndMiss).Note("a name missing from the table"),
		PrimaryKey:         provider.Is(provider.PrimaryKeyNameIsKey).Note("`instances/<name>`"),
		ProvisioningState:  provider.Is(provider.ProvisioningStateCreateBlocks),
		AsyncOps:           provider.Is(provider.AsyncOpsNone),
		SecondaryResources: provider.Is(provider.SecondaryResourcesNone).Note("no `SecondaryLister`; the conformance case for secondaries skips"),
		Credentials:        provider.Is(provider.CredentialsNone),
		ClientKind:         provider.Is(provider.ClientKindInProcess),
		Timeouts:           provider.Is(provider.TimeoutsCtxOnly).Note("Check bounds each listener's dial to 2 s"),
		Logging:            provider.Is(provider.LoggingTiered).Note("V(1) outcomes, V(2) addresses, ranges and upstream failures"),
		ChildSpans:         provider.Is(provider.ChildSpansNone).Note("no backend calls; the registry's decorator spans each call"),
		BackendTest:        "itself: real listeners on loopback",

		Placement: provider.PlacementUse{
			Zone:        "not used",
			Region:      "not used",
			MachineType: "not used",
			Image:       "not used",
		},
		CloudInit: provider.Is(provider.CloudInitIgnored).Note("the operator's process serves the proxy itself; nothing runs cloud-init"),
		Port:      "the listener's port on the instance's own loopback address",
		States:    []provider.State{provider.StateRunning, provider.StateStopped},
		Check: provider.CheckUse{
			Implemented: true,
			Probes:      "that `bindCIDR` can be bound and that every instance's listener accepts a connection",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonDegraded, provider.ReasonUnreachable,
				provider.ReasonTimeout, provider.ReasonAPIError},
		},
		CredentialRotation: "n/a: no credentials",
		TestedAgainst:      "the conformance suite over real loopback listeners (the slow-step and restart cases skip: instances live in the operator's process); the operator's tests on envtest (`internal/operator`) and `make demo`",
	}
}
