package kubernetes

import "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"

// Profile is the kubernetes provider's profile on the contract's axes and
// the compared rows (docs/providers.md is generated from it: make
// providers-doc).
func Profile() provider.Profile {
	return provider.Profile{
		Types: []string{Type},

		Readiness:          provider.Is(provider.ReadinessImmediate).Note("a Pod is scheduled and ready within seconds"),
		CreateReturn:       provider.Is(provider.CreateReturnSubmit).Note("the ConfigMap, NetworkPolicy, Pod and Service are created; the Pod reads Provisioning until Ready"),
		DeleteReturn:       provider.Is(provider.DeleteReturnReturnsEarly).Note("deletes are submitted; the reconciler polls Get until NotFound"),
		IPSource:           provider.Is(provider.IPSourceAssignedAtCreate).Note("the Pod IP; the endpoint is the Service's name"),
		GCMark:             provider.Is(provider.GCMarkNativeLabels),
		CreatedAt:          provider.Is(provider.CreatedAtBackendTimestamp).Note("the Pod's creationTimestamp"),
		ListPartial:        provider.Is(provider.ListPartialFailWhole).Note("one paged, label-selected list"),
		Quota:              provider.Is(provider.QuotaDetected).Note("a ResourceQuota refusal"),
		NotFound:           provider.Is(provider.NotFoundStatus404),
		PrimaryKey:         provider.Is(provider.PrimaryKeyNameIsKey).Note("`<namespace>/<name>`, with a UID guard (`provider.CheckAdoption`); an adopted object whose UID label is empty gets it by a merge patch preconditioned on its resourceVersion"),
		ProvisioningState:  provider.Is(provider.ProvisioningStateNative).Note("the Pod's phase and Ready condition"),
		AsyncOps:           provider.Is(provider.AsyncOpsNone),
		SecondaryResources: provider.Is(provider.SecondaryResourcesExplicit, provider.SecondaryResourcesCascade).Note("Service, ConfigMap and NetworkPolicy removed by name, UID-preconditioned, and listed by `ListSecondary` (IDs `<kind>/<namespace>/<name>/<object UID>`); plus an OwnerReference to the Proxy in its own namespace"),
		Credentials:        provider.Is(provider.CredentialsWorkloadIdentity).Note("in-cluster config or kubeconfig via `ctrl.GetConfig()`, loaded on first use"),
		ClientKind:         provider.Is(provider.ClientKindVendorSDK).Note("client-go typed clientset, its own rate limit (`clientQPS`, `clientBurst`)"),
		Timeouts:           provider.Is(provider.TimeoutsCtxOnly),
		Logging:            provider.Is(provider.LoggingTiered).Note("V(1) outcomes and one `kubernetes api call` line per request, V(2) the instance spec"),
		ChildSpans:         provider.Is(provider.ChildSpansTransportWrapper).Note("`httpobserve` (otelhttp), parent-gated, `HTTP <METHOD>`"),
		BackendTest:        "envtest: a real kube-apiserver and etcd, the test writing Pod status",

		Placement: provider.PlacementUse{
			Zone:        "a required node affinity on `topology.kubernetes.io/zone`",
			Region:      "a required node affinity on `topology.kubernetes.io/region`",
			MachineType: "a key of `machineTypes` (CPU and memory, requests = limits)",
			Image:       "refused: the entry's `image` is what runs",
		},
		CloudInit: provider.Is(provider.CloudInitIgnored).Note("the Pod runs Squid from the image with a generated squid.conf in its ConfigMap; the user-data is never read"),
		Port:      "Squid's `http_port`, the container port, the Service port and the NetworkPolicy's port",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateTerminated},
		Check: provider.CheckUse{
			Implemented: true,
			Probes:      "`/version`, then a SelfSubjectAccessReview per verb and resource (pods, services, configmaps, networkpolicies) in the target namespace; details `serverVersion`, `namespace`, `missing`",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonForbidden, provider.ReasonUnauthorized,
				provider.ReasonTimeout, provider.ReasonAPIError, provider.ReasonUnreachable},
		},
		CredentialRotation: "the client is built once; in-cluster, client-go re-reads the projected service account token file, so a rotated token is used without a restart; a changed kubeconfig needs one",
		TestedAgainst:      "the conformance suite on envtest's real kube-apiserver, a real ResourceQuota and Pod Security admission; the generated squid.conf in a real Squid",
	}
}
