package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// Create makes the instance's Pod, NetworkPolicy, ConfigMap, users'
// Secret (with clientAuth or an echo) and Service, four or five requests
// and no read, and returns as soon as the API server accepted them (the
// Pod reads Provisioning until the kubelet reports it Ready), or adopts
// the Pod already under req.Name when it is ours, making whichever of the
// other objects is missing.
// CloudInit is ignored: the Pod runs Squid from the image with a generated
// config, and no image here runs cloud-init.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	inst, how, err := p.create(ctx, p.logger(ctx), req)
	if err == nil {
		provider.Note(ctx, "outcome", how)
	}
	return inst, err
}

func (p *Provider) create(ctx context.Context, log logr.Logger, req provider.CreateRequest) (provider.Instance, string, error) {
	c, err := p.begin(ctx, provider.OpCreate)
	if err != nil {
		return provider.Instance{}, "", err
	}
	s, err := p.resolve(req)
	if err != nil {
		return provider.Instance{}, "", err
	}
	if p.usesEcho() {
		// Used only if the Secret is made now: an adopted one keeps the
		// token its Pod's Squid read.
		if s.echoToken, err = squid.NewEchoProberToken(); err != nil {
			return provider.Instance{}, "", provider.Errorf(provider.ErrTransient, "making the echo's token: %w", err)
		}
	}
	log.V(2).Info("instance spec", "namespace", s.namespace, "image", p.cfg.Image, "port", req.Port,
		"allowedSourceRanges", req.AllowedSourceRanges, "zone", req.Placement.Zone,
		"region", req.Placement.Region, "machineType", req.Placement.MachineType,
		"cpu", s.size.CPU, "memory", s.size.Memory, "ownerReference", s.namespace == req.Namespace)

	// The Pod decides adoption: it is the instance, the other objects
	// follow it. One the cache shows is ours already (a retry, a Create
	// after a crash); otherwise its POST is the question, so a new
	// instance costs no read: AlreadyExists says somebody's Pod has the
	// name, read live and judged. A refused name touches nothing.
	pods := c.CoreV1().Pods(s.namespace)
	podKey := objectKey{"pod", s.namespace, s.name}
	existing, found, _ := p.cache.pod(s.namespace, s.name)
	if !found {
		pod, err := createOwn(&p.cache, podKey, req.UID, func() (*corev1.Pod, error) {
			return pods.Create(ctx, p.buildPod(s), metav1.CreateOptions{})
		})
		switch {
		case err == nil:
			if err := p.ensureSecondary(ctx, c, s); err != nil {
				return provider.Instance{}, "", err
			}
			return instanceOf(pod), "created", nil
		case !apierrors.IsAlreadyExists(err):
			return provider.Instance{}, "", classify(err, "creating pod "+instanceID(s.namespace, s.name))
		}
		if existing, err = pods.Get(ctx, s.name, metav1.GetOptions{}); err != nil {
			return provider.Instance{}, "", classify(err, "reading pod "+instanceID(s.namespace, s.name))
		}
	}
	if err := p.adoptable(existing.Labels, req.UID, "pod", s); err != nil {
		p.cache.own.settle(podKey) // somebody else's: the cache never sees it
		return provider.Instance{}, "", err
	}
	pod, err := fillUIDMark(ctx, p, "pod", s, existing, pods.Patch)
	if err != nil {
		return provider.Instance{}, "", err
	}
	if pod, err = fillGroupLabel(ctx, p, s, pod, pods.Patch); err != nil {
		return provider.Instance{}, "", err
	}
	if err := p.ensureSecondary(ctx, c, s); err != nil {
		return provider.Instance{}, "", err
	}
	return instanceOf(pod), "adopted", nil
}

// adoptable applies the contract's adoption rule to an existing object of
// kind; a refusal is Permanent and leaves the object untouched.
func (p *Provider) adoptable(labels map[string]string, uid, kind string, s spec) error {
	v := provider.CheckAdoption(provider.MarksFromLabels(labels), p.opts.InstallationID, uid)
	if v == provider.Adopt {
		return nil
	}
	return provider.Errorf(provider.ErrPermanent, "%s %s: %w",
		kind, instanceID(s.namespace, s.name), provider.AdoptionError(v, s.name))
}

// ensureSecondary makes the NetworkPolicy, then the ConfigMap, users'
// Secret (with clientAuth or an echo) and Service of a Pod (of an adopted
// one too, when a crash or a human removed them). The policy goes first:
// the Pod's container cannot start before its ConfigMap (and Secret)
// exist, so a Pod is never serving unfenced. The other three need nothing
// of each other and are made at once. Of several failures, the first in
// that order is returned.
func (p *Provider) ensureSecondary(ctx context.Context, c clientset.Interface, s spec) error {
	if err := p.ensureNetworkPolicy(ctx, c, s); err != nil {
		return err
	}
	steps := [...]func(context.Context, clientset.Interface, spec) error{p.ensureConfigMap, p.ensureSecret, p.ensureService}
	var errs [len(steps)]error
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() { errs[i] = step(ctx, c, s) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *Provider) ensureConfigMap(ctx context.Context, c clientset.Interface, s spec) error {
	api := c.CoreV1().ConfigMaps(s.namespace)
	return ensure(ctx, p, s, "configmap", func() (*corev1.ConfigMap, error) {
		return api.Create(ctx, p.buildConfigMap(s), metav1.CreateOptions{})
	}, func() (*corev1.ConfigMap, error) {
		return api.Get(ctx, s.name, metav1.GetOptions{})
	}, api.Patch)
}

func (p *Provider) ensureService(ctx context.Context, c clientset.Interface, s spec) error {
	api := c.CoreV1().Services(s.namespace)
	return ensure(ctx, p, s, "service", func() (*corev1.Service, error) {
		svc, err := api.Create(ctx, p.buildService(s), metav1.CreateOptions{})
		if isServiceRangeFull(err) {
			// Said once here, where the fix is known; classify keeps the
			// class (the API status is still in the chain).
			return svc, fmt.Errorf("the cluster's Service ClusterIP range is full (kube-apiserver's --service-cluster-ip-range; `kubectl get servicecidrs` shows it): set serviceType: %s on this entry, which needs no ClusterIP, or widen the range: %w", ServiceHeadless, err)
		}
		return svc, err
	}, func() (*corev1.Service, error) {
		return api.Get(ctx, s.name, metav1.GetOptions{})
	}, api.Patch)
}

// ensure creates an object of kind, or accepts the one already there when
// it passes the adoption rule (the same config for the same name and
// shape, so an existing one is used as it is), filling in its UID mark
// when that is empty.
func ensure[T metav1.Object](ctx context.Context, p *Provider, s spec, kind string,
	create func() (T, error), get func() (T, error), patch patchFunc[T]) error {
	what := kind + " " + instanceID(s.namespace, s.name)
	_, err := createOwn(&p.cache, objectKey{kind, s.namespace, s.name}, s.req.UID, create)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return classify(err, "creating "+what)
	}
	obj, err := get()
	if err != nil {
		return classify(err, "reading "+what)
	}
	if err := p.adoptable(obj.GetLabels(), s.req.UID, kind, s); err != nil {
		return err
	}
	_, err = fillUIDMark(ctx, p, kind, s, obj, patch)
	return err
}

// patchFunc is a typed client's Patch.
type patchFunc[T metav1.Object] func(ctx context.Context, name string, pt types.PatchType, data []byte,
	opts metav1.PatchOptions, subresources ...string) (T, error)

// fillUIDMark writes the request's UID into the UID label of an adopted
// object whose label is empty, in the API server, and returns the object as
// it is now. The contract says a provider completes an empty mark when it
// adopts (the name derives from the Proxy's UID and shape, so it is the
// evidence of ownership); a mark left empty would keep the instance looking
// like an orphan to the garbage collector. The patch carries the
// resourceVersion that was judged, so an object changed since is a
// Conflict (Transient) and the next Create judges it again.
func fillUIDMark[T metav1.Object](ctx context.Context, p *Provider, kind string, s spec, obj T, patch patchFunc[T]) (T, error) {
	if obj.GetLabels()[provider.MarkUID] != "" {
		return obj, nil
	}
	var zero T
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": obj.GetResourceVersion(),
		"labels":          map[string]string{provider.MarkUID: s.req.UID},
	}})
	if err != nil {
		return zero, provider.Errorf(provider.ErrPermanent, "encoding the UID mark patch: %w", err)
	}
	got, err := patch(ctx, obj.GetName(), types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return zero, classify(err, "writing the UID mark of "+kind+" "+instanceID(s.namespace, s.name))
	}
	p.logger(ctx).WithValues("name", s.name).V(1).Info("adopted object had an empty UID mark; filled in", "kind", kind)
	return got, nil
}
