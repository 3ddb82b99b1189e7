package libvirt

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"

// Profile is the profile of the libvirt provider, under both its type
// names, on the contract's axes and the compared rows (docs/providers.md is
// generated from it: make providers-doc).
func Profile() provider.Profile {
	return provider.Profile{
		Types: []string{TypeKVM, TypeKVM2},

		Readiness:          provider.Is(provider.ReadinessProvisioningWindow).Note("a minute or two: an image download first, once per host, then boot and cloud-init"),
		CreateReturn:       provider.Is(provider.CreateReturnBackground).Note("the in-flight table: capacity precheck, seed, image cache, overlay, define, start"),
		DeleteReturn:       provider.Is(provider.DeleteReturnWaits).Note("the domain, its overlay and its seed are gone when Delete returns"),
		IPSource:           provider.Is(provider.IPSourceDiscovered).Note("the guest agent, the DHCP lease, ARP"),
		GCMark:             provider.Is(provider.GCMarkWrittenMetadata).Note("one element in the domain's `<metadata>`; volumes carry the marks in their names"),
		CreatedAt:          provider.Is(provider.CreatedAtWrittenAtCreate).Note("`createdAt` in the metadata element"),
		ListPartial:        provider.Is(provider.ListPartialOmitUnreachable).Note("a host that does not answer is left out"),
		Quota:              provider.Is(provider.QuotaDetected).Note("the capacity precheck, plus libvirt's out-of-space and out-of-memory messages"),
		NotFound:           provider.Is(provider.NotFoundErrorCode).Note("libvirt's `ErrNoDomain`, `ErrNoStorageVol`, `ErrNoDomainMetadata`"),
		PrimaryKey:         provider.Is(provider.PrimaryKeyNameIsKey).Note("`hosts/<host>/domains/<name>`, with a UID guard"),
		ProvisioningState:  provider.Is(provider.ProvisioningStateNative).Note("the domain's state and whether it has an address"),
		AsyncOps:           provider.Is(provider.AsyncOpsNone),
		SecondaryResources: provider.Is(provider.SecondaryResourcesExplicit).Note("the overlay volume and the NoCloud seed ISO, listed by `ListSecondary`"),
		Credentials:        provider.Is(provider.CredentialsMountedFiles).Note("the SSH key and `known_hosts` (the `kvm-ssh` Secret), re-read on every dial"),
		ClientKind:         provider.Is(provider.ClientKindRPCOverSSH).Note("go-libvirt over an SSH `direct-streamlocal` channel to libvirtd's socket"),
		Timeouts:           provider.Is(provider.TimeoutsPerCall).Note("hard budgets: 2 min per RPC, 1 h per upload, 30 s per dial; a caller's ctx ends its wait at once"),
		Logging:            provider.Is(provider.LoggingTiered),
		ChildSpans:         provider.Is(provider.ChildSpansSpanDecorator),
		BackendTest:        "the real libvirtd, QEMU and sshd of the `hack/libvirt` test host (`make test-libvirt`)",

		Placement: provider.PlacementUse{
			Zone:        "a host, by its `name`; optional with one host",
			Region:      "not used",
			MachineType: "a key of `machineTypes` (vCPUs, memory); default `defaultMachineType`",
			Image:       "a key of `images`, or an http(s) URL with `#sha256=<digest>`; default `defaultImage`",
		},
		CloudInit: provider.Is(provider.CloudInitNoCloudSeed).Note("a seed ISO in the host's pool on a CD-ROM: the Proxy's cloudInit or the generated Squid cloud-config, vendor-data installing qemu-guest-agent"),
		Port:      "Squid's `http_port` in the generated cloud-config",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateStopped},
		Check: provider.CheckUse{
			Implemented: true,
			Probes:      "every host concurrently, on a fresh connection: libvirt's version, the hostname, the domain type (configured or detected), the pool's state, capacity and free space, the free memory",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonDegraded, ReasonCredentialsUnavailable,
				provider.ReasonUnauthorized, provider.ReasonForbidden, provider.ReasonUnreachable, provider.ReasonTimeout,
				ReasonPoolNotFound, ReasonPoolNotActive, ReasonHypervisorUnavailable, provider.ReasonAPIError},
		},
		CredentialRotation: "the key and `known_hosts` are read on every dial: an updated Secret is used from the next connection (a pooled one lives until it dies)",
		TestedAgainst:      "unit and lifecycle tests against an in-process libvirt RPC server and x/crypto/ssh server; the conformance suite (`test/libvirt/conformance`) against the real libvirtd, QEMU and sshd of the `hack/libvirt` test host",
	}
}
