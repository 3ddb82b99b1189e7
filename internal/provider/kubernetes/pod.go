package kubernetes

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// The Proxy the objects are owned by; the CreateRequest carries its name,
// namespace and UID only, so the OwnerReference is built from them.
const (
	proxyAPIVersion = "egress.proxy-operator.dev/v1alpha1"
	proxyKind       = "Proxy"
)

// Labels besides the marks. labelInstance is the Service's selector, so a
// Service selects exactly its own Pod.
const (
	labelName       = "app.kubernetes.io/name"
	labelInstance   = "app.kubernetes.io/instance"
	labelManagedBy  = "app.kubernetes.io/managed-by"
	labelNameValue  = "egress-proxy"
	managedByValue  = "egress-proxies-operator"
	annotationProxy = "egress.proxy-operator.dev/proxy"
	containerName   = "squid"
	portName        = "proxy"
	configVolume    = "squid-conf"
	zoneLabel       = corev1.LabelTopologyZone
	regionLabel     = corev1.LabelTopologyRegion
)

// spec is a validated CreateRequest with what the entry adds: everything
// the builders need, so they are pure.
type spec struct {
	name      string
	namespace string
	req       provider.CreateRequest
	ranges    []netip.Prefix
	// policy is the entry's destination policy narrowed to the Proxy's
	// rules, what the Pod's squid.conf renders.
	policy *egress.Policy
	size   MachineType
	// echoToken admits the operator's ask of the entry's echo through the
	// Pod (echo.go); empty when the entry names no echo.
	echoToken string
}

// hasSecret says whether the instance has a Secret: for its clientAuth
// users, or the echo's token.
func (s spec) hasSecret() bool { return s.req.ClientAuth.Len() > 0 || s.echoToken != "" }

// resolve validates req against the entry, naming every problem no retry
// can fix (Permanent).
func (p *Provider) resolve(req provider.CreateRequest) (spec, error) {
	s := spec{name: req.Name, namespace: p.namespaceFor(req.Namespace), req: req, size: p.cfg.Resources}
	var problems []string
	if req.Name == "" {
		problems = append(problems, "name is empty")
	} else if msgs := validation.IsDNS1035Label(req.Name); len(msgs) > 0 {
		// The name is the Pod's, the Service's (a DNS-1035 label) and the
		// key of the ID.
		problems = append(problems, fmt.Sprintf("name %q: %s", req.Name, strings.Join(msgs, "; ")))
	}
	if s.namespace == "" {
		problems = append(problems, "namespace is empty and the entry names none")
	} else if msgs := validation.IsDNS1123Label(s.namespace); len(msgs) > 0 {
		problems = append(problems, fmt.Sprintf("namespace %q: %s", s.namespace, strings.Join(msgs, "; ")))
	}
	if req.Port < 1 || req.Port > 65535 {
		problems = append(problems, fmt.Sprintf("port %d is outside 1-65535", req.Port))
	}
	// Canonical ranges only: masking 10.0.0.1/8 would admit more than the
	// author meant.
	if req.ClientAuth.Len() > 0 {
		if _, err := clientauth.Parse([]byte(req.ClientAuth.Reveal())); err != nil {
			problems = append(problems, "clientAuth: "+err.Error())
		}
	}
	ranges, policy, errs := p.dest.ForRequest(req.AllowedSourceRanges, req.Destinations)
	for _, e := range errs {
		problems = append(problems, e.Error())
	}
	if len(errs) == 0 {
		s.ranges, s.policy = ranges, policy
	}
	pl := req.Placement
	if pl.MachineType != "" {
		mt, ok := p.cfg.MachineTypes[pl.MachineType]
		if !ok {
			problems = append(problems, fmt.Sprintf("placement.machineType %q is not in the entry's machineTypes (%s)",
				pl.MachineType, strings.Join(p.machineTypeNames(), ", ")))
		}
		s.size = mt
	}
	if pl.Image != "" {
		// The image is the entry's: a Proxy author must not pick what runs
		// with the operator's Pod permissions in the target namespace.
		problems = append(problems, "placement.image is not supported by the kubernetes provider; set image in the provider entry")
	}
	for _, kv := range [][2]string{{"placement.zone", pl.Zone}, {"placement.region", pl.Region}} {
		if kv[1] == "" {
			continue
		}
		if msgs := validation.IsValidLabelValue(kv[1]); len(msgs) > 0 {
			problems = append(problems, fmt.Sprintf("%s %q: %s", kv[0], kv[1], strings.Join(msgs, "; ")))
		}
	}
	if g := req.Group; g != nil {
		// The group's UID is the member label's value, which the group's
		// Service selects.
		if msgs := validation.IsValidLabelValue(g.UID); g.UID == "" || len(msgs) > 0 {
			problems = append(problems, fmt.Sprintf("group UID %q is not a label value: %s", g.UID, strings.Join(msgs, "; ")))
		}
	}
	if len(problems) > 0 {
		return spec{}, provider.Errorf(provider.ErrPermanent, "invalid request: %s", strings.Join(problems, "; "))
	}
	return s, nil
}

func (p *Provider) machineTypeNames() []string {
	names := make([]string, 0, len(p.cfg.MachineTypes))
	for n := range p.cfg.MachineTypes {
		names = append(names, n)
	}
	if len(names) == 0 {
		return []string{"none configured"}
	}
	slices.Sort(names)
	return names
}

// meta is the ObjectMeta every object of the instance shares: the marks,
// the instance label and, in the Proxy's own namespace, the OwnerReference.
func (p *Provider) meta(s spec) metav1.ObjectMeta {
	labels := provider.Marks{Managed: true, UID: s.req.UID, Installation: p.opts.InstallationID}.Labels()
	labels[labelName] = labelNameValue
	labels[labelInstance] = s.name
	labels[labelManagedBy] = managedByValue
	m := metav1.ObjectMeta{
		Name:      s.name,
		Namespace: s.namespace,
		Labels:    labels,
	}
	if s.req.ProxyName != "" {
		m.Annotations = map[string]string{annotationProxy: s.req.Namespace + "/" + s.req.ProxyName}
	}
	if ref, ok := ownerRef(s); ok {
		m.OwnerReferences = []metav1.OwnerReference{ref}
	}
	return m
}

// podMeta is meta with the entry's podLabels and podAnnotations added, on
// the Pod only: they are for a CNI's egress policy, which selects Pods.
// Validation refused the provider's own keys; the provider's values are
// applied last anyway, so the Service's and NetworkPolicy's selectors and
// the marks can never take the entry's value.
//
// A member of a ProxyGroup (req.Group) also carries labelGroupUID, on the
// Pod only: it is what the group's Service, PodDisruptionBudget and the
// members' anti-affinity select (group.go), and the instance's other
// objects must not look like the group's to the listings.
func (p *Provider) podMeta(s spec) metav1.ObjectMeta {
	m := p.meta(s)
	m.Labels = withOurs(p.cfg.PodLabels, m.Labels)
	m.Annotations = withOurs(p.cfg.PodAnnotations, m.Annotations)
	if g := s.req.Group; g != nil {
		m.Labels[labelGroupUID] = g.UID
	}
	return m
}

// withOurs is extra with ours over it; nil when both are empty.
func withOurs(extra, ours map[string]string) map[string]string {
	if len(extra) == 0 {
		return ours
	}
	out := maps.Clone(extra)
	maps.Copy(out, ours)
	return out
}

// ownerRef makes the Proxy the controller of the objects, so that deleting
// the Proxy with its finalizer bypassed still removes them. Kubernetes has
// no cross-namespace owners (the garbage collector would treat the owner as
// absent and delete the objects at once), so an entry that names another
// namespace gets none. blockOwnerDeletion stays false: it would need
// update rights on proxies/finalizers and the reconciler already deletes
// the instance before it lets the Proxy go.
func ownerRef(s spec) (metav1.OwnerReference, bool) {
	if s.req.UID == "" || s.req.ProxyName == "" || s.namespace != s.req.Namespace {
		return metav1.OwnerReference{}, false
	}
	return metav1.OwnerReference{
		APIVersion:         proxyAPIVersion,
		Kind:               proxyKind,
		Name:               s.req.ProxyName,
		UID:                types.UID(s.req.UID),
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(false),
	}, true
}

// buildConfigMap holds the generated squid.conf.
func (p *Provider) buildConfigMap(s spec) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: p.meta(s),
		Data:       map[string]string{confFile: podSquidConf(s.req.Port, s.ranges, s.policy, s.req.ClientAuth.Len() > 0, s.echoToken != "")},
	}
}

// buildPod is the Squid Pod; it meets Pod Security "restricted".
func (p *Provider) buildPod(s spec) *corev1.Pod {
	uid := *p.cfg.RunAsUser
	port := intstr.FromInt32(s.req.Port)
	qty := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(s.size.CPU),
		corev1.ResourceMemory: resource.MustParse(s.size.Memory),
	}
	scratch := []struct{ name, path string }{
		{"run", runDir}, {"spool", spoolDir}, {"cache", cacheDir}, {"log", logDir}, {"tmp", tmpDir},
	}
	volumes := []corev1.Volume{{
		Name: configVolume,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.name},
		}},
	}}
	mounts := []corev1.VolumeMount{{Name: configVolume, MountPath: confDir, ReadOnly: true}}
	var fsGroup *int64
	if s.hasSecret() {
		// Readable by Squid's group only (fsGroup): the hashes and the
		// echo's token are not for other readers in the Pod, and not
		// optional: without them the Pod waits rather than admit clients
		// by range alone.
		volumes = append(volumes, corev1.Volume{
			Name: usersVolume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: s.name, DefaultMode: ptr.To[int32](0o440), Optional: ptr.To(false),
			}},
		})
		mounts = append(mounts, corev1.VolumeMount{Name: usersVolume, MountPath: usersDir, ReadOnly: true})
		fsGroup = ptr.To(uid)
	}
	for _, v := range scratch {
		volumes = append(volumes, corev1.Volume{
			Name:         v.name,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}},
		})
		mounts = append(mounts, corev1.VolumeMount{Name: v.name, MountPath: v.path})
	}
	pod := &corev1.Pod{
		ObjectMeta: p.podMeta(s),
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			// Squid needs no API access and no other Services' addresses.
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](15),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(uid),
				RunAsGroup:     ptr.To(uid),
				FSGroup:        fsGroup,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Affinity: podAffinity(s),
			Containers: []corev1.Container{{
				Name:  containerName,
				Image: p.cfg.Image,
				// -N: stay in the foreground as the container's process.
				Command: []string{"squid", "-N", "-f", confDir + "/" + confFile},
				Ports: []corev1.ContainerPort{{
					Name: portName, ContainerPort: s.req.Port, Protocol: corev1.ProtocolTCP,
				}},
				Resources: corev1.ResourceRequirements{Requests: qty, Limits: qty.DeepCopy()},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}},
					PeriodSeconds: 5, FailureThreshold: 2,
				},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}},
					InitialDelaySeconds: 10, PeriodSeconds: 20, FailureThreshold: 3,
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					RunAsUser:                ptr.To(uid),
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}
	return pod
}

// podAffinity is the Pod's affinity: placement's node affinity and, for a
// group's member, the spread from the group's other members; nil when
// neither applies (a Proxy with no group and no zone or region).
func podAffinity(s spec) *corev1.Affinity {
	a := nodeAffinity(s.req.Placement)
	if g := s.req.Group; g != nil {
		if a == nil {
			a = &corev1.Affinity{}
		}
		a.PodAntiAffinity = groupAntiAffinity(g.UID)
	}
	return a
}

// nodeAffinity pins the Pod to placement's zone and region; nil when
// placement names neither.
func nodeAffinity(pl provider.Placement) *corev1.Affinity {
	var reqs []corev1.NodeSelectorRequirement
	if pl.Zone != "" {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: zoneLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{pl.Zone}})
	}
	if pl.Region != "" {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: regionLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{pl.Region}})
	}
	if len(reqs) == 0 {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}},
		},
	}}
}

// serviceHost is the stable in-cluster name of an instance's Service.
func serviceHost(name, namespace string) string { return name + "." + namespace + ".svc" }

// buildService gives the Pod the stable name <name>.<namespace>.svc.
func (p *Provider) buildService(s spec) *corev1.Service {
	return &corev1.Service{ObjectMeta: p.meta(s), Spec: p.serviceSpec(map[string]string{
		labelInstance:        s.name,
		provider.MarkManaged: provider.MarkManagedValue,
	}, s.req.Port)}
}

// serviceSpec is a proxy Service's spec, an instance's or a group's:
// selector's Pods on their named port, headless or with a ClusterIP as the
// entry's serviceType says.
func (p *Provider) serviceSpec(selector map[string]string, port int32) corev1.ServiceSpec {
	clusterIP := "" // allocated from the Service range
	if p.cfg.ServiceType == ServiceHeadless {
		clusterIP = corev1.ClusterIPNone
	}
	return corev1.ServiceSpec{
		Type:      corev1.ServiceTypeClusterIP,
		ClusterIP: clusterIP,
		Selector:  selector,
		Ports: []corev1.ServicePort{{
			Name: portName, Protocol: corev1.ProtocolTCP,
			Port: port, TargetPort: intstr.FromString(portName),
		}},
	}
}

// stateOf maps a Pod to the contract's state. A Pod being deleted is
// Terminated whatever its phase: it is going away for good, and the
// reconciler, polling Get after its own Delete, waits for NotFound either
// way; one deleted behind its back (eviction, kubectl) is deleted and
// created anew. Running needs an IP; whether Squid accepts connections is
// the serving signal (servingOf), the Pod's Ready condition.
func stateOf(pod *corev1.Pod) provider.State {
	if pod.DeletionTimestamp != nil {
		return provider.StateTerminated
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		if pod.Status.PodIP != "" {
			return provider.StateRunning
		}
		return provider.StateProvisioning
	case corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
		return provider.StateTerminated
	default: // Pending, or no phase yet
		return provider.StateProvisioning
	}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// instanceOf is the contract's picture of pod; IP only when Running.
func instanceOf(pod *corev1.Pod) provider.Instance {
	inst := provider.Instance{
		ID:        instanceID(pod.Namespace, pod.Name),
		UID:       pod.Labels[provider.MarkUID],
		State:     stateOf(pod),
		CreatedAt: pod.CreationTimestamp.UTC(),
	}
	if inst.State == provider.StateRunning {
		inst.IP = pod.Status.PodIP
		// The Service keeps this name when the Pod is replaced.
		inst.Host = serviceHost(pod.Name, pod.Namespace)
		inst.Serving, inst.ServingDetail = servingOf(pod)
	}
	return inst
}

// servingOf is the serving signal of a running Pod: the Squid container's
// readiness probe (a TCP connect to its port), which the kubelet reports
// as the Pod's Ready condition.
func servingOf(pod *corev1.Pod) (provider.Serving, string) {
	if podReady(pod) {
		return provider.ServingAnswering, ""
	}
	return provider.ServingNotAnswering, "the Squid container's readiness probe does not pass"
}
