package kubernetes

import (
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// Profile is the kubernetes provider's profile on the contract's axes and
// the compared rows (docs/providers.md is generated from it: make
// providers-doc).
func Profile() profile.Profile {
	return profile.Profile{
		Readiness:          profile.Is(profile.ReadinessImmediate).Note("a Pod is scheduled and ready within seconds"),
		ServingSignal:      profile.Is(profile.ServingReadinessProbe).Note("the Squid container's readiness probe (a TCP connect to its port), the Pod's `Ready` condition; a running Pod that fails it is Running and not answering"),
		EgressIP:           profile.Is(profile.EgressIPEcho).Note("the entry's `egressIPEcho`, asked once a minute by the operator through the Pod's own Squid (so from the node, or the CNI's egress gateway, the Pod egresses through), which admits that one request by a token in the instance's Secret; none without it"),
		CreateReturn:       profile.Is(profile.CreateReturnSubmit).Note("the ConfigMap, NetworkPolicy, Pod and Service are created; the Pod reads Provisioning until Ready"),
		DeleteReturn:       profile.Is(profile.DeleteReturnReturnsEarly).Note("deletes are submitted; the reconciler polls Get until NotFound"),
		IPSource:           profile.Is(profile.IPSourceAssignedAtCreate).Note("the Pod IP; the endpoint is the Service's name"),
		StaticAddress:      profile.Is(profile.StaticAddressNone).Note("the CNI gives the Pod IP"),
		GCMark:             profile.Is(profile.GCMarkNativeLabels),
		CreatedAt:          profile.Is(profile.CreatedAtBackendTimestamp).Note("the Pod's creationTimestamp"),
		ListPartial:        profile.Is(profile.ListPartialFailWhole).Note("one paged, label-selected list"),
		Quota:              profile.Is(profile.QuotaDetected).Note("a ResourceQuota refusal"),
		NotFound:           profile.Is(profile.NotFoundStatus404),
		PrimaryKey:         profile.Is(profile.PrimaryKeyNameIsKey).Note("`<namespace>/<name>`, with a UID guard (`provider.CheckAdoption`); an adopted object whose UID label is empty gets it by a merge patch preconditioned on its resourceVersion"),
		ProvisioningState:  profile.Is(profile.ProvisioningStateNative).Note("the Pod's phase and Ready condition"),
		AsyncOps:           profile.Is(profile.AsyncOpsNone),
		SecondaryResources: profile.Is(profile.SecondaryResourcesExplicit, profile.SecondaryResourcesCascade).Note("Service, ConfigMap, Secret and NetworkPolicy removed by name, UID-preconditioned, and listed by `ListSecondary` (IDs `<kind>/<namespace>/<name>/<object UID>`), as are a ProxyGroup's Service and PodDisruptionBudget, with no instance; plus an OwnerReference to the Proxy (or ProxyGroup) in its own namespace"),
		Credentials:        profile.Is(profile.CredentialsWorkloadIdentity).Note("in-cluster config or kubeconfig via `ctrl.GetConfig()`, loaded on first use"),
		ClientKind:         profile.Is(profile.ClientKindVendorSDK).Note("client-go typed clientset; a client-side limit only if the entry sets one (`clientQPS`, `clientBurst`)"),
		Timeouts:           profile.Is(profile.TimeoutsCtxOnly),
		Logging:            profile.Is(profile.LoggingTiered).Note("V(1) outcomes and one `kubernetes api call` line per request, V(2) the instance spec"),
		ChildSpans:         profile.Is(profile.ChildSpansTransportWrapper).Note("`httpobserve` (otelhttp), parent-gated, `HTTP <METHOD>`"),
		BackendTest:        "envtest: a real kube-apiserver and etcd, the test writing Pod status",

		Placement: profile.PlacementUse{
			Zone:        "a required node affinity on `topology.kubernetes.io/zone`",
			Region:      "a required node affinity on `topology.kubernetes.io/region`",
			MachineType: "a key of `machineTypes` (CPU and memory, requests = limits)",
			Image:       "refused: the entry's `image` is what runs",
		},
		CloudInit: profile.Is(profile.CloudInitIgnored).Note("the Pod runs Squid from the image with a generated squid.conf in its ConfigMap; the user-data is never read"),
		Port:      "Squid's `http_port`, the container port, the Service port and the NetworkPolicy's port",
		States:    []provider.State{provider.StateProvisioning, provider.StateRunning, provider.StateTerminated},
		Check: profile.CheckUse{
			Implemented: true,
			Probes:      "`/version`, then a SelfSubjectAccessReview per verb and resource (pods, services, configmaps, secrets, networkpolicies, poddisruptionbudgets) in the target namespace; details `serverVersion`, `namespace`, `missing`",
			Reasons: []string{provider.ReasonHealthy, provider.ReasonForbidden, provider.ReasonUnauthorized,
				provider.ReasonTimeout, provider.ReasonAPIError, provider.ReasonUnreachable},
		},
		CredentialRotation: "the client is built once; in-cluster, client-go re-reads the projected service account token file, so a rotated token is used without a restart; a changed kubeconfig needs one",
		TestedAgainst:      "the conformance suite on envtest's real kube-apiserver, a real ResourceQuota and Pod Security admission; the generated squid.conf in a real Squid",
	}
}
