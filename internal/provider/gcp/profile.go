package gcp

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"

// Profile is the gcp provider's profile on the contract's axes and the
// compared rows (docs/providers.md is generated from it: make
// providers-doc).
func Profile() provider.Profile {
	return provider.Profile{
		Types: []string{Type},

		Readiness:          provider.Is(provider.ReadinessProvisioningWindow).Note("the VM boots and cloud-init installs Squid: tens of seconds to minutes"),
		CreateReturn:       provider.Is(provider.CreateReturnBackground).Note("the in-flight table: firewall rule, insert, its operation"),
		DeleteReturn:       provider.Is(provider.DeleteReturnReturnsEarly).Note("one operation, followed in the background, then the rule"),
		IPSource:           provider.Is(provider.IPSourceAssignedAtCreate).Note("the external NAT IP, or the internal IP (`addressMode`)"),
		GCMark:             provider.Is(provider.GCMarkNativeLabels, provider.GCMarkWrittenMetadata).Note("labels on instances; description marks on firewall rules"),
		CreatedAt:          provider.Is(provider.CreatedAtBackendTimestamp).Note("the instance's creationTimestamp"),
		ListPartial:        provider.Is(provider.ListPartialOmitUnreachable).Note("an aggregated list's unreachable zones are logged and counted"),
		Quota:              provider.Is(provider.QuotaDetected).Note("operation error codes, 429, 403 quota and rate reasons"),
		NotFound:           provider.Is(provider.NotFoundStatus404).Note("only a 404 naming the instance"),
		PrimaryKey:         provider.Is(provider.PrimaryKeyNameIsKey).Note("`zones/<zone>/instances/<name>`, with a UID guard"),
		ProvisioningState:  provider.Is(provider.ProvisioningStateNative).Note("GCE's instance status"),
		AsyncOps:           provider.Is(provider.AsyncOpsTaskHandle).Note("operations followed to their end in the background, their errors read from the operation"),
		SecondaryResources: provider.Is(provider.SecondaryResourcesExplicit, provider.SecondaryResourcesCascade).Note("the firewall rule, listed by `ListSecondary`; the boot disk is cascade (AutoDelete)"),
		Credentials:        provider.Is(provider.CredentialsMountedFiles, provider.CredentialsEnvironment, provider.CredentialsWorkloadIdentity).Note("`credentialsFile` (a service account key), else Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's file, the metadata server)"),
		ClientKind:         provider.Is(provider.ClientKindVendorSDK).Note("cloud.google.com/go/compute (REST) behind the ctx-first seam `computeAPI`"),
		Timeouts:           provider.Is(provider.TimeoutsPerCall).Note("20 s reads, 30 s writes, 150 s operation waits; 9 s for a caller's whole call"),
		Logging:            provider.Is(provider.LoggingTiered).Note("with a V(5) wire log"),
		ChildSpans:         provider.Is(provider.ChildSpansTransportWrapper).Note("`httpobserve`, parent-gated"),
		BackendTest:        "none: no Compute Engine here; the real SDK against the in-repo fake Compute API (`fakecompute`)",

		Placement: provider.PlacementUse{
			Zone:        "a GCE zone, one of `zones` when the entry lists any; default `defaultZone`",
			Region:      "the zone must be in it",
			MachineType: "a key of `machineTypes`, or without a catalogue a GCE machine type; default `defaultMachineType`",
			Image:       "a key of `images`, or without a catalogue `projects/<p>/global/images/[family/]<name>`; images without cloud-init are refused",
		},
		CloudInit: provider.Is(provider.CloudInitInstanceMetadata).Note("the `user-data` metadata key: the Proxy's cloudInit, or the generated Squid cloud-config (`internal/provider/squid`)"),
		Port:      "Squid's `http_port` in the generated cloud-config, and the firewall rule's `tcp:<port>`",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateStopped, provider.StateTerminated},
		Check: provider.CheckUse{
			Implemented: true,
			Probes:      "`projects.get` (credentials, API enabled, endpoint, project), then `regions.get` per region in use; details include the firewall quota and per-region CPUS, INSTANCES and IN_USE_ADDRESSES",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonUnauthorized, provider.ReasonForbidden,
				provider.ReasonUnreachable, provider.ReasonTimeout, provider.ReasonAPIError},
		},
		CredentialRotation: "a key file (also ADC's) is checked on every token request and read again when it changed: a rotated Secret is used from the next request, without a restart",
		TestedAgainst:      "the conformance suite (every case) and gap tests with the real SDK against `fakecompute` and a `gcptest` OAuth token endpoint; the reconciler on envtest's real API server; never the real Compute Engine",
	}
}
