package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

var _ provider.UsersUpdater = (*Provider)(nil)

// A Proxy's clientAuth users reach its Pod as a Secret of the instance's
// name (never a ConfigMap), mounted read-only at usersDir; squid.conf
// points basic_ncsa_auth at usersDir/usersKey. The same Secret holds the
// echo's token (echoTokenKey, echo.go) when the entry names an echo.
const (
	usersVolume = "users"
	usersDir    = "/etc/squid-users"
	usersKey    = "htpasswd"
)

// buildSecret holds the Proxy's htpasswd file and the echo's token.
func (p *Provider) buildSecret(s spec) *corev1.Secret {
	return instanceSecret(p.meta(s), s.req.ClientAuth, s.echoToken)
}

// instanceSecret is the instance's Secret with meta, for Create and for a
// Secret made again beside its Pod: the users' file when there are users,
// the echo's token file when there is a token.
func instanceSecret(meta metav1.ObjectMeta, users provider.Sensitive, echoToken string) *corev1.Secret {
	data := map[string][]byte{}
	if users.Len() > 0 {
		data[usersKey] = []byte(users.Reveal())
	}
	if echoToken != "" {
		// The token is 64 hex digits (squid.NewEchoProberToken), so the
		// file cannot fail to render.
		file, _ := squid.EchoProberTokenFile(echoToken)
		data[echoTokenKey] = []byte(file)
	}
	return &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: data}
}

// ensureSecret makes the users' Secret, or takes the one already there
// (adoption rule, UID mark) and gives it the request's users when it holds
// others: a Create after a rotation must not leave the old ones in place.
func (p *Provider) ensureSecret(ctx context.Context, c clientset.Interface, s spec) error {
	if !s.hasSecret() {
		return nil
	}
	api := c.CoreV1().Secrets(s.namespace)
	created := false
	err := ensure(ctx, p, s, "secret", func() (*corev1.Secret, error) {
		sec, err := api.Create(ctx, p.buildSecret(s), metav1.CreateOptions{})
		created = err == nil
		return sec, err
	}, func() (*corev1.Secret, error) {
		return api.Get(ctx, s.name, metav1.GetOptions{})
	}, api.Patch)
	if err != nil || created || s.req.ClientAuth.Len() == 0 {
		return err
	}
	// Adopted: read it as it is now (ensure may have filled its UID mark).
	sec, err := api.Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return classify(err, "reading secret "+instanceID(s.namespace, s.name))
	}
	_, err = p.writeUsers(ctx, c, sec, s.req.ClientAuth)
	return err
}

// UpdateUsers gives the running instance id the users of a rotated
// clientAuth Secret in place: it rewrites the instance's own Secret, which
// the kubelet syncs into the Pod (about a minute, its sync period), where
// basic_ncsa_auth reads the file again on the next check after its
// modification time changed. Squid itself is not restarted and no
// connection is cut. A Secret removed behind the provider's back is made
// again from the Pod's marks.
func (p *Provider) UpdateUsers(ctx context.Context, id string, users provider.Sensitive) error {
	outcome, err := p.updateUsers(ctx, id, users)
	if err == nil {
		provider.Note(ctx, "outcome", outcome)
	}
	return err
}

func (p *Provider) updateUsers(ctx context.Context, id string, users provider.Sensitive) (string, error) {
	c, err := p.begin(ctx, provider.OpUpdateUsers)
	if err != nil {
		return "", err
	}
	ns, name, err := parseID(id)
	if err != nil {
		return "", err
	}
	if _, err := clientauth.Parse([]byte(users.Reveal())); err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "clientAuth: %v", err)
	}
	what := "secret " + id
	sec, err := c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return p.remakeSecret(ctx, c, ns, name, users)
	case err != nil:
		return "", classify(err, "reading "+what)
	case !p.ours(sec.Labels):
		return "", provider.Errorf(provider.ErrPermanent, "%s is not this installation's: left alone", what)
	}
	return p.writeUsers(ctx, c, sec, users)
}

// remakeSecret makes the users' Secret of the Pod ns/name again, with the
// Pod's marks, the provider's labels and annotation, and its owner.
func (p *Provider) remakeSecret(ctx context.Context, c clientset.Interface, ns, name string, users provider.Sensitive) (string, error) {
	id := instanceID(ns, name)
	pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && !p.ours(pod.Labels)) {
		return "", provider.Errorf(provider.ErrNotFound, "pod %s is gone", id)
	}
	if err != nil {
		return "", classify(err, "reading pod "+id)
	}
	// The provider's own labels and annotation only: the entry's
	// podLabels and podAnnotations, and whatever else the Pod gathered,
	// are the Pod's, not its Secret's.
	// A new echo token too: the Pod's Squid read the old one at start, so
	// its ask of the echo is refused until the Pod is replaced (the
	// condition says so); the users, which matter, work at once.
	var token string
	if p.usesEcho() {
		if token, err = squid.NewEchoProberToken(); err != nil {
			return "", provider.Errorf(provider.ErrTransient, "making the echo's token: %w", err)
		}
	}
	sec := instanceSecret(metav1.ObjectMeta{
		Name: name, Namespace: ns,
		Labels:          onlyKeys(pod.Labels, reservedPodLabels),
		Annotations:     onlyKeys(pod.Annotations, reservedPodAnnotations),
		OwnerReferences: pod.OwnerReferences,
	}, users, token)
	owner := provider.MarksFromLabels(pod.Labels).UID
	if _, err := createOwn(&p.cache, objectKey{"secret", ns, name}, owner, func() (*corev1.Secret, error) {
		return c.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
	}); err != nil {
		// AlreadyExists: a concurrent call made it; the next pass compares.
		return "", classify(err, "creating secret "+id)
	}
	p.logger(ctx).V(1).Info("the users' secret was gone; made again", "id", id)
	return "created", nil
}

// onlyKeys is m restricted to the keys of keep; nil when none is there.
func onlyKeys(m, keep map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if _, ok := keep[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// writeUsers gives sec the users unless it has them. The patch carries the
// resourceVersion read, so a Secret changed since is a Conflict
// (Transient) and the next pass compares again.
func (p *Provider) writeUsers(ctx context.Context, c clientset.Interface, sec *corev1.Secret, users provider.Sensitive) (string, error) {
	want := []byte(users.Reveal())
	if bytes.Equal(sec.Data[usersKey], want) {
		return "unchanged", nil
	}
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": sec.ResourceVersion},
		"data":     map[string][]byte{usersKey: want},
	})
	if err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "encoding the users patch: %w", err)
	}
	what := "secret " + instanceID(sec.Namespace, sec.Name)
	if _, err := c.CoreV1().Secrets(sec.Namespace).Patch(ctx, sec.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return "", classify(err, "writing the users of "+what)
	}
	p.logger(ctx).V(1).Info("users written", "secret", what)
	return "updated", nil
}
