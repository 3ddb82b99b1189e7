package proxmox

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"

// Profile is the proxmox provider's profile on the contract's axes and the
// compared rows (docs/providers.md is generated from it: make
// providers-doc).
func Profile() provider.Profile {
	return provider.Profile{
		Types: []string{Type},

		Readiness:          provider.Is(provider.ReadinessProvisioningWindow).Note("a minute or so: clone, seed upload, boot, cloud-init"),
		CreateReturn:       provider.Is(provider.CreateReturnBackground).Note("the clone is submitted in the call; its task, the seed upload, config, resize and start run in the in-flight table, with progress (`clone task 40%`)"),
		DeleteReturn:       provider.Is(provider.DeleteReturnReturnsEarly).Note("stop, seed ISO removal and destroy run in the background; Get reads NotFound once all is gone"),
		IPSource:           provider.Is(provider.IPSourceDiscovered).Note("the QEMU guest agent (`network-get-interfaces`)"),
		GCMark:             provider.Is(provider.GCMarkWrittenMetadata).Note("tags (`proxy-operator`, `poi-`, `pou-`, `poc-`) read from `/cluster/resources`, and the same mark in the description"),
		CreatedAt:          provider.Is(provider.CreatedAtWrittenAtCreate).Note("the `poc-<time>` tag"),
		ListPartial:        provider.Is(provider.ListPartialFailWhole).Note("one cluster-wide `/cluster/resources` read"),
		Quota:              provider.Is(provider.QuotaDetected).Note("out of space on the storage, no free VMID in the range"),
		NotFound:           provider.Is(provider.NotFoundListAndMiss, provider.NotFoundErrorCode).Note("Get misses the VMID in `/cluster/resources`; elsewhere PVE's 500 `does not exist`"),
		PrimaryKey:         provider.Is(provider.PrimaryKeyAllocatedID).Note("`vms/<vmid>/<name>`: the VMID from a hash of the UID, probed forward in `vmidMin..vmidMax`, with the name and mark as the guard; no node (VMs migrate)"),
		ProvisioningState:  provider.Is(provider.ProvisioningStateNative).Note("the VM's status and lock, and the guest agent's answer"),
		AsyncOps:           provider.Is(provider.AsyncOpsTaskHandle).Note("UPIDs followed in the background; `WARNINGS: n` is success"),
		SecondaryResources: provider.Is(provider.SecondaryResourcesExplicit).Note("the seed ISO, removed on every configured node in Delete and listed by `ListSecondary` (one left on a node the VM migrated from included)"),
		Credentials:        provider.Is(provider.CredentialsMountedFiles).Note("the API token file (`user@realm!id=secret`) and the CA file"),
		ClientKind:         provider.Is(provider.ClientKindThinClient).Note("`net/http`, one method per endpoint"),
		Timeouts:           provider.Is(provider.TimeoutsPerCall).Note("`requestTimeoutSeconds` (30 s) per request"),
		Logging:            provider.Is(provider.LoggingTiered),
		ChildSpans:         provider.Is(provider.ChildSpansTransportWrapper).Note("`httpobserve`, one span per request"),
		BackendTest:        "none: no PVE here; the real client against the in-repo PVE API (`fakepve`) over TLS",

		Placement: provider.PlacementUse{
			Zone:        "a node, one of `nodes`; default the first",
			Region:      "not used",
			MachineType: "a key of `machineTypes` (cores, memory); default `defaultMachineType`",
			Image:       "a key of `templates` (a template's VMID); default `defaultTemplate`",
		},
		CloudInit: provider.Is(provider.CloudInitNoCloudSeed).Note("a seed ISO uploaded to `isoStorage`, on `ide2`: the Proxy's cloudInit or the generated Squid cloud-config, vendor-data installing qemu-guest-agent"),
		Port:      "Squid's `http_port` in the generated cloud-config",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateStopped},
		Check: provider.CheckUse{
			Implemented: true,
			Probes:      "every node concurrently: the token, `/version`, the node's status, the ISO storage (active, `iso` content, free space), every catalogue template present and a template",
			Reasons: []string{provider.ReasonHealthy, "CredentialsUnavailable", "CertificateInvalid",
				provider.ReasonUnauthorized, provider.ReasonForbidden, provider.ReasonUnreachable, provider.ReasonTimeout,
				provider.ReasonAPIError, "StorageNotFound", "TemplateNotFound"},
		},
		CredentialRotation: "the token file is re-read on every request; the CA file is reloaded when its modification time or size changes",
		TestedAgainst:      "the conformance suite, the gap tests and a lifecycle test with the real client against `fakepve` over TLS, whose answers match captured PVE fixtures; never a real PVE",
	}
}
