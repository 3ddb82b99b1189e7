package kubernetes

import (
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// A Proxy's users reach its Pod as a Secret of the instance's name, mounted
// read-only for Squid's group, and squid.conf asks basic_ncsa_auth to check
// them against the mounted file; without users there is neither.
func TestBuildWithUsers(t *testing.T) {
	p := pureProvider(t, Config{})
	req := baseRequest()
	req.ClientAuth = provider.Sensitive(clientauthtest.File(t, "alice", "pw"))
	s, err := p.resolve(req)
	if err != nil {
		t.Fatal(err)
	}
	sec := p.buildSecret(s)
	if sec.Name != req.Name || string(sec.Data[usersKey]) != req.ClientAuth.Reveal() || len(sec.OwnerReferences) != 1 ||
		provider.MarksFromLabels(sec.Labels) != (provider.Marks{Managed: true, UID: "uid-1", Installation: "inst-1"}) {
		t.Errorf("secret %+v: want the instance's name, marks and owner with the file under %q", sec.ObjectMeta, usersKey)
	}
	pod := p.buildPod(s)
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == usersVolume {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != req.Name || *vol.Secret.DefaultMode != 0o440 || *vol.Secret.Optional {
		t.Fatalf("users volume %+v: want the instance's Secret, mode 0440, not optional", vol)
	}
	if g := pod.Spec.SecurityContext.FSGroup; g == nil || *g != *p.cfg.RunAsUser {
		t.Errorf("fsGroup %v, want Squid's group %d so it reads the 0440 file", g, *p.cfg.RunAsUser)
	}
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == usersVolume && m.MountPath == usersDir && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("mounts %+v: want %s read-only at %s", pod.Spec.Containers[0].VolumeMounts, usersVolume, usersDir)
	}
	conf := p.buildConfigMap(s).Data[confFile]
	if !strings.Contains(conf, "auth_param basic program /usr/lib/squid/basic_ncsa_auth "+usersDir+"/"+usersKey+"\n") ||
		!strings.Contains(conf, "http_access deny decided_client_auth !authenticated\n") {
		t.Errorf("squid.conf does not check the mounted users:\n%s", conf)
	}
	if strings.Contains(conf, "$2a$") {
		t.Errorf("squid.conf holds a hash:\n%s", conf)
	}

	plain, err := p.resolve(baseRequest())
	if err != nil {
		t.Fatal(err)
	}
	pod = p.buildPod(plain)
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("a Pod without users mounts Secret %s", v.Secret.SecretName)
		}
	}
	if pod.Spec.SecurityContext.FSGroup != nil || strings.Contains(p.buildConfigMap(plain).Data[confFile], "auth_param") {
		t.Error("a Pod without users has an fsGroup or an auth_param")
	}
}

// TestUsersSecretLifecycle (issue 21): against a real API server, Create
// makes the users' Secret beside the Pod, UpdateUsers rewrites it in place
// (the Pod and its name stay: the kubelet syncs the file), says so when
// nothing changed, makes it again from the Pod's marks when it was
// removed, answers NotFound for a gone Pod and leaves a Secret of another
// installation alone; the garbage collector's listing and Delete cover it.
// No users, hash or password reaches an error or a log line.
func TestUsersSecretLifecycle(t *testing.T) {
	const sentinel = "SENTINELpw"
	cs := adminClient(t)
	ns := newNamespace(t, "users", nil)
	// The entry's Pod metadata is the Pod's: a remade Secret must not take it.
	raw := newAPIProvider(t, "users-test", Config{Namespace: ns,
		PodLabels: map[string]string{"egress.example.com/gateway": "partner-a"}, PodAnnotations: map[string]string{"example.com/owner": "platform"}}, nil)
	b := boundary(raw)
	var logs testenv.LogLines
	ctx := logs.Context(2)
	first := clientauthtest.File(t, "alice", sentinel+"1")
	req := provider.CreateRequest{Name: provider.InstanceName("team", "web", "uid-u", "s1"), Namespace: "team",
		ProxyName: "web", UID: "uid-u", Port: 3128, AllowedSourceRanges: []string{"10.0.0.0/8"}, ClientAuth: provider.Sensitive(first)}
	inst, err := b.Provider.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	secret := func() *corev1.Secret {
		t.Helper()
		sec, err := cs.CoreV1().Secrets(ns).Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the users' secret: %v", err)
		}
		return sec
	}
	if got := string(secret().Data[usersKey]); got != first {
		t.Fatalf("secret holds %d bytes, want the %d of the request's file", len(got), len(first))
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	outcome := func(want string) {
		t.Helper()
		if got := logs.Find(`"msg"="update_users done"`, `"outcome"="`+want+`"`); len(got) == 0 {
			t.Errorf("no update_users done line with outcome %q:\n%s", want, logs.String())
		}
	}
	second := clientauthtest.File(t, "alice", sentinel+"2", "bob", sentinel+"3")
	if err := b.Users.UpdateUsers(ctx, inst.ID, provider.Sensitive(second)); err != nil {
		t.Fatal(err)
	}
	outcome("updated")
	if got := string(secret().Data[usersKey]); got != second {
		t.Errorf("after UpdateUsers the secret holds %d bytes, want the %d of the new file", len(got), len(second))
	}
	if now, err := cs.CoreV1().Pods(ns).Get(ctx, req.Name, metav1.GetOptions{}); err != nil || now.UID != pod.UID {
		t.Errorf("the Pod was replaced or lost (%v): rotation must keep it", err)
	}
	if err := b.Users.UpdateUsers(ctx, inst.ID, provider.Sensitive(second)); err != nil {
		t.Fatal(err)
	}
	outcome("unchanged")

	made := secret()
	if err := cs.CoreV1().Secrets(ns).Delete(ctx, req.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Users.UpdateUsers(ctx, inst.ID, provider.Sensitive(second)); err != nil {
		t.Fatal(err)
	}
	outcome("created")
	remade := secret()
	if string(remade.Data[usersKey]) != second || provider.MarksFromLabels(remade.Labels).UID != "uid-u" || len(remade.OwnerReferences) != len(pod.OwnerReferences) {
		t.Errorf("remade secret %+v: want the file with the Pod's marks and owner", remade.ObjectMeta)
	}
	if !maps.Equal(remade.Labels, made.Labels) || !maps.Equal(remade.Annotations, made.Annotations) {
		t.Errorf("remade secret labels %v annotations %v, want the first one's %v and %v (the Pod's own metadata stays the Pod's)",
			remade.Labels, remade.Annotations, made.Labels, made.Annotations)
	}

	list, err := b.Secondary.ListSecondary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := secondariesOf(list, req.Name)["secret"]; !ok {
		t.Errorf("ListSecondary %+v lacks the users' secret", list)
	}

	// Another installation's Secret under the name is left alone.
	theirs := remade.DeepCopy()
	theirs.Labels[provider.MarkInstallation] = "someone-else"
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, theirs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = b.Users.UpdateUsers(ctx, inst.ID, provider.Sensitive(first))
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "not this installation's") {
		t.Errorf("UpdateUsers over another installation's secret: %v, want Permanent", err)
	}
	if string(secret().Data[usersKey]) != second {
		t.Error("another installation's secret was written")
	}
	theirs = secret()
	theirs.Labels[provider.MarkInstallation] = "users-test"
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, theirs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A malformed file never reaches the API.
	err = b.Users.UpdateUsers(ctx, inst.ID, provider.Sensitive("alice:"+sentinel+"\n"))
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "clientAuth: line 1") {
		t.Errorf("UpdateUsers with a plain-text password: %v, want Permanent naming the line", err)
	}

	if err := b.Provider.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if exists(t, cs, "secret", ns, req.Name) {
		t.Error("Delete left the users' secret")
	}
	err = b.Users.UpdateUsers(ctx, inst.ID, provider.Sensitive(second))
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("UpdateUsers after Delete: %v, want NotFound", err)
	}
	for _, leak := range []string{sentinel, "$2a$"} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("a log line carries %q:\n%s", leak, logs.String())
		}
	}
}
