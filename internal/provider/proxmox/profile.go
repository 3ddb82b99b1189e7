package proxmox

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// Profile is the proxmox provider's profile on the contract's axes and the
// compared rows (docs/providers.md is generated from it: make
// providers-doc). The guest agent of the serving signal also updates a
// group member's peers in place, through agent/exec and
// agent/exec-status (grouppeers.go; the token then needs
// VM.GuestAgent.Unrestricted, VM.Monitor on PVE 8); no axis of the
// profile covers that.
func Profile() profile.Profile {
	return profile.Profile{
		Readiness:          profile.Is(profile.ReadinessProvisioningWindow).Note("a minute or so: clone, seed upload, boot, cloud-init"),
		ServingSignal:      profile.Is(profile.ServingGuestAgent).Note("the guest's reporter (installed by the seed's vendor-data) writes `/run/egress-proxy/report` every 10 s; Get reads it through PVE's `agent/file-read` (its third request; the token needs `VM.GuestAgent.FileRead`); a VM made before the reporter (no `pos-1` tag) reports none"),
		EgressIP:           profile.Is(profile.EgressIPEcho).Note("the entry's `egressIPEcho`, asked through the proxy by the guest's reporter once a minute and read with its report (`agent/file-read`); none without it"),
		CreateReturn:       profile.Is(profile.CreateReturnBackground).Note("the clone is submitted in the call; its task, the seed upload, config, resize and start run in the in-flight table, with progress (`clone task 40%`)"),
		DeleteReturn:       profile.Is(profile.DeleteReturnReturnsEarly).Note("stop, seed ISO removal and destroy run in the background; Get reads NotFound once all is gone"),
		IPSource:           profile.Is(profile.IPSourceDiscovered).Note("the QEMU guest agent (`network-get-interfaces`)"),
		StaticAddress:      profile.Is(profile.StaticAddressPool).Note("the seed's network-config (cloud-init v2) puts the address, gateway and DNS on the NIC by net0's MAC instead of DHCP (on `bridge`, net0 gets a MAC derived from the instance name); IPv4 only"),
		GCMark:             profile.Is(profile.GCMarkWrittenMetadata).Note("tags (`proxy-operator`, `poi-`, `pou-`, `poc-`) read from `/cluster/resources`, and the same mark in the description"),
		CreatedAt:          profile.Is(profile.CreatedAtWrittenAtCreate).Note("the `poc-<time>` tag"),
		ListPartial:        profile.Is(profile.ListPartialFailWhole).Note("one cluster-wide `/cluster/resources` read"),
		Quota:              profile.Is(profile.QuotaDetected).Note("out of space on the storage, no free VMID in the range"),
		NotFound:           profile.Is(profile.NotFoundListAndMiss, profile.NotFoundErrorCode).Note("Get misses the VMID in `/cluster/resources`; elsewhere PVE's 500 `does not exist`"),
		PrimaryKey:         profile.Is(profile.PrimaryKeyAllocatedID).Note("`vms/<vmid>/<name>`: the VMID from a hash of the UID, probed forward in `vmidMin..vmidMax`, with the name and mark as the guard; no node (VMs migrate)"),
		ProvisioningState:  profile.Is(profile.ProvisioningStateNative).Note("the VM's status and lock, and the guest agent's answer"),
		AsyncOps:           profile.Is(profile.AsyncOpsTaskHandle).Note("UPIDs followed in the background; `WARNINGS: n` is success"),
		SecondaryResources: profile.Is(profile.SecondaryResourcesExplicit).Note("the seed ISO, removed on every configured node in Delete and listed by `ListSecondary` (one left on a node the VM migrated from included)"),
		Credentials:        profile.Is(profile.CredentialsMountedFiles).Note("the API token file (`user@realm!id=secret`) and the CA file"),
		ClientKind:         profile.Is(profile.ClientKindThinClient).Note("`net/http`, one method per endpoint"),
		Timeouts:           profile.Is(profile.TimeoutsPerCall).Note("`requestTimeoutSeconds` (30 s) per request"),
		Logging:            profile.Is(profile.LoggingTiered),
		ChildSpans:         profile.Is(profile.ChildSpansTransportWrapper).Note("`httpobserve`, one span per request"),
		BackendTest:        "none: no PVE here; the real client against the in-repo PVE API (`fakepve`) over TLS",

		Placement: profile.PlacementUse{
			Zone:        "a node, one of `nodes`; default the first",
			Region:      "not used",
			MachineType: "a key of `machineTypes` (cores, memory); default `defaultMachineType`",
			Image:       "a key of `templates` (a template's VMID); default `defaultTemplate`",
		},
		CloudInit: profile.Is(profile.CloudInitNoCloudSeed).Note("a seed ISO uploaded to `isoStorage`, on `ide2`: the Proxy's cloudInit or the generated Squid cloud-config, vendor-data installing the serving reporter and qemu-guest-agent"),
		Port:      "Squid's `http_port` in the generated cloud-config",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateStopped},
		Check: profile.CheckUse{
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
