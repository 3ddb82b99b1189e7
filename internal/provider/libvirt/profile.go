package libvirt

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// Profile is the profile of the libvirt provider, under both its type
// names, on the contract's axes and the compared rows (docs/providers.md is
// generated from it: make providers-doc). The guest agent of the serving
// signal also updates a group member's peers in place, through guest-exec
// (grouppeers.go); no axis of the profile covers that.
func Profile() profile.Profile {
	return profile.Profile{
		Readiness:          profile.Is(profile.ReadinessProvisioningWindow).Note("a minute or two: an image download first, once per host, then boot and cloud-init"),
		ServingSignal:      profile.Is(profile.ServingGuestAgent).Note("the guest's reporter (vendor-data) writes a report every 10 s; Get reads it through the QEMU guest agent (three agent commands); a site's own vendorData without the reporter: none"),
		EgressIP:           profile.Is(profile.EgressIPEcho).Note("the entry's `egressIPEcho`, asked through the proxy by the guest's reporter once a minute and read with its report; none without it"),
		CreateReturn:       profile.Is(profile.CreateReturnBackground).Note("the in-flight table: capacity precheck, seed, image cache, overlay, define, start"),
		DeleteReturn:       profile.Is(profile.DeleteReturnWaits).Note("the domain, its overlay and its seed are gone when Delete returns"),
		IPSource:           profile.Is(profile.IPSourceDiscovered).Note("the guest agent, the DHCP lease, ARP"),
		StaticAddress:      profile.Is(profile.StaticAddressPool).Note("the seed's network-config (cloud-init v2) puts the address, gateway and DNS on the NIC by the domain's MAC instead of DHCP; IPv4 only; a bridge or libvirt network, not `userNetworking`"),
		GCMark:             profile.Is(profile.GCMarkWrittenMetadata).Note("one element in the domain's `<metadata>`; volumes carry the marks in their names"),
		CreatedAt:          profile.Is(profile.CreatedAtWrittenAtCreate).Note("`createdAt` in the metadata element"),
		ListPartial:        profile.Is(profile.ListPartialOmitUnreachable).Note("a host that does not answer is left out"),
		Quota:              profile.Is(profile.QuotaDetected).Note("the capacity precheck, plus libvirt's out-of-space and out-of-memory messages"),
		NotFound:           profile.Is(profile.NotFoundErrorCode).Note("libvirt's `ErrNoDomain`, `ErrNoStorageVol`, `ErrNoDomainMetadata`"),
		PrimaryKey:         profile.Is(profile.PrimaryKeyNameIsKey).Note("`hosts/<host>/domains/<name>`, with a UID guard"),
		ProvisioningState:  profile.Is(profile.ProvisioningStateNative).Note("the domain's state and whether it has an address"),
		AsyncOps:           profile.Is(profile.AsyncOpsNone),
		SecondaryResources: profile.Is(profile.SecondaryResourcesExplicit).Note("the overlay volume and the NoCloud seed ISO, listed by `ListSecondary`"),
		Credentials:        profile.Is(profile.CredentialsMountedFiles).Note("the SSH key and `known_hosts` (the `kvm-ssh` Secret), re-read on every dial"),
		ClientKind:         profile.Is(profile.ClientKindRPCOverSSH).Note("go-libvirt over an SSH `direct-streamlocal` channel to libvirtd's socket"),
		Timeouts:           profile.Is(profile.TimeoutsPerCall).Note("hard budgets: 2 min per RPC, 1 h per upload, 30 s per dial; a caller's ctx ends its wait at once"),
		Logging:            profile.Is(profile.LoggingTiered),
		ChildSpans:         profile.Is(profile.ChildSpansSpanDecorator),
		BackendTest:        "the real libvirtd, QEMU and sshd of the `hack/libvirt` test host (`make test-libvirt`)",

		Placement: profile.PlacementUse{
			Zone:        "a host, by its `name`; optional with one host",
			Region:      "not used",
			MachineType: "a key of `machineTypes` (vCPUs, memory); default `defaultMachineType`",
			Image:       "a key of `images`, or an http(s) URL with `#sha256=<digest>`; default `defaultImage`",
		},
		CloudInit: profile.Is(profile.CloudInitNoCloudSeed).Note("a seed ISO in the host's pool on a CD-ROM: the Proxy's cloudInit or the generated Squid cloud-config, vendor-data installing qemu-guest-agent"),
		Port:      "Squid's `http_port` in the generated cloud-config",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateStopped},
		Check: profile.CheckUse{
			Implemented: true,
			Probes:      "every host concurrently, on a fresh connection: libvirt's version, the hostname, the domain type (configured or detected), the pool's state, capacity and free space, the free memory",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonDegraded, ReasonCredentialsUnavailable,
				provider.ReasonUnauthorized, provider.ReasonForbidden, provider.ReasonUnreachable, provider.ReasonTimeout,
				ReasonPoolNotFound, ReasonPoolNotActive, ReasonHypervisorUnavailable, provider.ReasonAPIError},
		},
		CredentialRotation: "the key and `known_hosts` are read on every dial: an updated Secret is used from the next connection (a pooled one lives until it dies)",
		TestedAgainst:      "unit and lifecycle tests against an in-process libvirt RPC server and x/crypto/ssh server; the conformance suite against an in-memory host whose guests boot from their seed, and (`test/libvirt/conformance`) against the real libvirtd, QEMU and sshd of the `hack/libvirt` test host",
	}
}
