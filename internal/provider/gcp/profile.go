package gcp

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// Profile is the gcp provider's profile on the contract's axes and the
// compared rows (docs/providers.md is generated from it: make
// providers-doc). The external NAT IP of ip-source is also the egress
// address Get reports (applyBackendEgress); its note says so once the
// egress-ip axis comes, as a changed note needs docs/providers.md
// generated again, outside this package.
func Profile() profile.Profile {
	return profile.Profile{
		Readiness:          profile.Is(profile.ReadinessProvisioningWindow).Note("the VM boots and cloud-init installs Squid: tens of seconds to minutes"),
		ServingSignal:      profile.Is(profile.ServingGuestAttributes).Note("the guest's reporter (installed by the `startup-script` metadata, with `enable-guest-attributes`) writes the guest attribute `egress-proxy/report` every 10 s; `Get` reads it with `instances.getGuestAttributes`, at most once per instance per 10 s; instances made before it have no signal"),
		EgressIP:           profile.Is(profile.EgressIPBackend, profile.EgressIPEcho).Note("external `addressMode`: the instance's external NAT IP, which its packets leave with; internal: the entry's `egressIPEcho`, asked by the guest's reporter and read with the guest attribute"),
		CreateReturn:       profile.Is(profile.CreateReturnBackground).Note("the in-flight table: firewall rule, insert, its operation"),
		DeleteReturn:       profile.Is(profile.DeleteReturnReturnsEarly).Note("one operation, followed in the background, then the rule"),
		IPSource:           profile.Is(profile.IPSourceAssignedAtCreate).Note("the external NAT IP, or the internal IP (`addressMode`)"),
		StaticAddress:      profile.Is(profile.StaticAddressNone).Note("the VPC gives the internal IP; a kept address is the egress address (`spec.egressAddress`), not the NIC's"),
		GCMark:             profile.Is(profile.GCMarkNativeLabels, profile.GCMarkWrittenMetadata).Note("labels on instances; description marks on firewall rules"),
		CreatedAt:          profile.Is(profile.CreatedAtBackendTimestamp).Note("the instance's creationTimestamp"),
		ListPartial:        profile.Is(profile.ListPartialOmitUnreachable).Note("an aggregated list's unreachable zones are logged and counted"),
		Quota:              profile.Is(profile.QuotaDetected).Note("operation error codes, 429, 403 quota and rate reasons"),
		NotFound:           profile.Is(profile.NotFoundStatus404).Note("only a 404 naming the instance"),
		PrimaryKey:         profile.Is(profile.PrimaryKeyNameIsKey).Note("`zones/<zone>/instances/<name>`, with a UID guard"),
		ProvisioningState:  profile.Is(profile.ProvisioningStateNative).Note("GCE's instance status"),
		AsyncOps:           profile.Is(profile.AsyncOpsTaskHandle).Note("operations followed to their end in the background, their errors read from the operation"),
		SecondaryResources: profile.Is(profile.SecondaryResourcesExplicit, profile.SecondaryResourcesCascade).Note("the firewall rule, listed by `ListSecondary`; the boot disk is cascade (AutoDelete)"),
		Credentials:        profile.Is(profile.CredentialsMountedFiles, profile.CredentialsEnvironment, profile.CredentialsWorkloadIdentity).Note("`credentialsFile` (a service account key), else Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's file, the metadata server)"),
		ClientKind:         profile.Is(profile.ClientKindVendorSDK).Note("cloud.google.com/go/compute (REST) behind the ctx-first seam `computeAPI`"),
		Timeouts:           profile.Is(profile.TimeoutsPerCall).Note("20 s reads, 30 s writes, 150 s operation waits; 9 s for a caller's whole call"),
		Logging:            profile.Is(profile.LoggingTiered).Note("with a V(5) wire log"),
		ChildSpans:         profile.Is(profile.ChildSpansTransportWrapper).Note("`httpobserve`, parent-gated"),
		BackendTest:        "none: no Compute Engine here; the real SDK against the in-repo fake Compute API (`fakecompute`)",

		Placement: profile.PlacementUse{
			Zone:        "a GCE zone, one of `zones` when the entry lists any; default `defaultZone`",
			Region:      "the zone must be in it",
			MachineType: "a key of `machineTypes`, or without a catalogue a GCE machine type; default `defaultMachineType`",
			Image:       "a key of `images`, or without a catalogue `projects/<p>/global/images/[family/]<name>`; images without cloud-init are refused",
		},
		CloudInit: profile.Is(profile.CloudInitInstanceMetadata).Note("the `user-data` metadata key: the Proxy's cloudInit, or the generated Squid cloud-config (`internal/provider/squid`)"),
		Port:      "Squid's `http_port` in the generated cloud-config, and the firewall rule's `tcp:<port>`",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateStopped, provider.StateTerminated},
		Check: profile.CheckUse{
			Implemented: true,
			Probes:      "`projects.get` (credentials, API enabled, endpoint, project), then `regions.get` per region in use; details include the firewall quota and per-region CPUS, INSTANCES and IN_USE_ADDRESSES",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonUnauthorized, provider.ReasonForbidden,
				provider.ReasonUnreachable, provider.ReasonTimeout, provider.ReasonAPIError},
		},
		CredentialRotation: "a key file (also ADC's) is checked on every token request and read again when it changed: a rotated Secret is used from the next request, without a restart",
		TestedAgainst:      "the conformance suite (every case) and gap tests with the real SDK against `fakecompute` and a `gcptest` OAuth token endpoint; the reconciler on envtest's real API server; never the real Compute Engine",
	}
}
