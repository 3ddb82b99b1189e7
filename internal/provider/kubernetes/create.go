package kubernetes

import (
	"context"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Create makes the instance's ConfigMap, NetworkPolicy, Pod and Service and returns as soon
// as the API server accepted them (the Pod reads Provisioning until the
// kubelet reports it Ready), or adopts the Pod already under req.Name when
// it is ours, making whichever of the ConfigMap and Service is missing.
// CloudInit is ignored: the Pod runs Squid from the image with a generated
// config, and no image here runs cloud-init.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	log := p.logger(ctx).WithValues("name", req.Name)
	inst, how, err := p.create(ctx, log, req)
	if err != nil {
		err = p.wrap(provider.OpCreate, nil, err)
		outcome(log, provider.OpCreate, err)
		return provider.Instance{}, err
	}
	outcome(log, provider.OpCreate, nil, "id", inst.ID, "state", inst.State, "outcome", how)
	return inst, nil
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
	log.V(2).Info("instance spec", "namespace", s.namespace, "image", p.cfg.Image, "port", req.Port,
		"allowedSourceRanges", req.AllowedSourceRanges, "zone", req.Placement.Zone,
		"region", req.Placement.Region, "machineType", req.Placement.MachineType,
		"cpu", s.size.CPU, "memory", s.size.Memory, "ownerReference", s.namespace == req.Namespace)

	// The Pod decides adoption: it is the instance, the other two objects
	// follow it. Reading it first means a refused name touches nothing.
	pods := c.CoreV1().Pods(s.namespace)
	existing, err := pods.Get(ctx, s.name, metav1.GetOptions{})
	switch {
	case err == nil:
		if err := p.adoptable(existing.Labels, req.UID, "pod", s); err != nil {
			return provider.Instance{}, "", err
		}
		if err := p.ensureSecondary(ctx, c, s); err != nil {
			return provider.Instance{}, "", err
		}
		return instanceOf(existing), "adopted", nil
	case !apierrors.IsNotFound(err):
		return provider.Instance{}, "", classify(err, "reading pod "+instanceID(s.namespace, s.name))
	}

	// ConfigMap first, so the Pod finds its config when it is scheduled;
	// the NetworkPolicy before the Pod, so the Pod is never unfenced.
	if err := p.ensureConfigMap(ctx, c, s); err != nil {
		return provider.Instance{}, "", err
	}
	if err := p.ensureNetworkPolicy(ctx, c, s); err != nil {
		return provider.Instance{}, "", err
	}
	pod, err := pods.Create(ctx, p.buildPod(s), metav1.CreateOptions{})
	how := "created"
	if apierrors.IsAlreadyExists(err) {
		// Another Create won the race: adopt its Pod like any other.
		pod, err = pods.Get(ctx, s.name, metav1.GetOptions{})
		if err == nil {
			err = p.adoptable(pod.Labels, req.UID, "pod", s)
		}
		how = "adopted"
	}
	if err != nil {
		return provider.Instance{}, "", classify(err, "creating pod "+instanceID(s.namespace, s.name))
	}
	if err := p.ensureService(ctx, c, s); err != nil {
		return provider.Instance{}, "", err
	}
	return instanceOf(pod), how, nil
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

// ensureSecondary makes the ConfigMap, NetworkPolicy and Service of an
// adopted Pod when a crash or a human removed them.
func (p *Provider) ensureSecondary(ctx context.Context, c clientset.Interface, s spec) error {
	if err := p.ensureConfigMap(ctx, c, s); err != nil {
		return err
	}
	if err := p.ensureNetworkPolicy(ctx, c, s); err != nil {
		return err
	}
	return p.ensureService(ctx, c, s)
}

func (p *Provider) ensureConfigMap(ctx context.Context, c clientset.Interface, s spec) error {
	api := c.CoreV1().ConfigMaps(s.namespace)
	return p.ensure(s, "configmap", func() error {
		_, err := api.Create(ctx, p.buildConfigMap(s), metav1.CreateOptions{})
		return err
	}, func() (metav1.Object, error) {
		return api.Get(ctx, s.name, metav1.GetOptions{})
	})
}

func (p *Provider) ensureService(ctx context.Context, c clientset.Interface, s spec) error {
	api := c.CoreV1().Services(s.namespace)
	return p.ensure(s, "service", func() error {
		_, err := api.Create(ctx, p.buildService(s), metav1.CreateOptions{})
		return err
	}, func() (metav1.Object, error) {
		return api.Get(ctx, s.name, metav1.GetOptions{})
	})
}

// ensure creates an object of kind, or accepts the one already there when
// it passes the adoption rule (the same config for the same name and
// shape, so an existing one is used as it is).
func (p *Provider) ensure(s spec, kind string, create func() error, get func() (metav1.Object, error)) error {
	what := kind + " " + instanceID(s.namespace, s.name)
	err := create()
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
	return p.adoptable(obj.GetLabels(), s.req.UID, kind, s)
}
