package squidcheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth/clientauthtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// What hack/image/test.sh passes: the containerd socket the image was
// imported into (namespace k8s.io) and the image's reference.
const (
	socketEnv = "SQUID_IMAGE_CTR_SOCKET"
	refEnv    = "SQUID_IMAGE_REF"
)

// nonroot is the image's user; the provider entry's runAsUser must say the
// same (docs/kubernetes-provider.md, "Building the Squid image").
const nonroot = 65532

// syncBuffer collects the container's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSquidImageRunsTheProvidersPod runs the image as the provider's Pod
// would run it and proxies a request through it: the provider's own
// squid.conf, its command (squid from PATH), uid 65532, a read-only root,
// the ConfigMap read-only at its mount path and an empty directory at each
// emptyDir's. The host network stands in for the Pod's; every address used
// is on loopback.
func TestSquidImageRunsTheProvidersPod(t *testing.T) {
	sock, ref := os.Getenv(socketEnv), os.Getenv(refEnv)
	if sock == "" || ref == "" {
		t.Skipf("%s and %s are not set: run `make image-test`, which builds the image and starts a containerd", socketEnv, refEnv)
	}
	ctx := context.Background()

	// The provider, as the operator builds it, against a real API server.
	env := testenv.Start(t)
	t.Setenv("KUBECONFIG", env.KubeconfigFile(t))
	ns := env.Namespace(t, "squid-image")
	port := testenv.FreePort(t)
	p, err := kubernetes.New("kubernetes", kubernetes.Config{
		Image:     ref,
		RunAsUser: ptr.To[int64](nonroot),
		// The check's origin is on loopback, which the proxies deny by
		// default.
		Settings: egress.Settings{AllowedDestinations: []string{"127.0.0.1/32"}},
	}, provider.Options{InstallationID: "squid-image-check"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() }) // its cache's watches
	name := "squid-image"
	// With users, so the image's basic_ncsa_auth checks them against the
	// mounted Secret, and reads it again when it is rotated in place.
	if _, err := p.Create(ctx, provider.CreateRequest{
		Name: name, Namespace: ns, ProxyName: name, UID: "8d4a3c5e-0000-4000-8000-000000000001",
		Port: port, AllowedSourceRanges: []string{"127.0.0.1/32"},
		ClientAuth: provider.Sensitive(clientauthtest.File(t, "alice", "first password")),
	}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	var pod corev1.Pod
	var cm corev1.ConfigMap
	var users corev1.Secret
	key := client.ObjectKey{Namespace: ns, Name: name}
	for _, obj := range []client.Object{&pod, &cm, &users} {
		if err := env.Client.Get(ctx, key, obj); err != nil {
			t.Fatal(err)
		}
	}
	var usersDir *secretVolume
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	if c.Image != ref || sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.RunAsUser, 0) != nonroot {
		t.Fatalf("the provider's container: image %q, securityContext %+v; want %s, a read-only root and uid %d", c.Image, sc, ref, nonroot)
	}

	// The Pod's volumes, as the kubelet would give them.
	args := []string{"-a", sock, "-n", "k8s.io", "run", "--rm", "--read-only", "--net-host"}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v := volumes[m.Name]
		switch {
		case v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.ReadOnly:
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for k, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args = append(args, "--mount", "type=bind,src="+dir+",dst="+m.MountPath+",options=rbind:ro")
		case v.Secret != nil && v.Secret.SecretName == users.Name && m.ReadOnly:
			usersDir = newSecretVolume(t, *v.Secret.DefaultMode, ptr.Deref(pod.Spec.SecurityContext.FSGroup, 0))
			usersDir.write(t, users.Data)
			args = append(args, "--mount", "type=bind,src="+usersDir.dir+",dst="+m.MountPath+",options=rbind:ro")
		case v.EmptyDir != nil:
			// The kubelet bind-mounts a fresh 0777 directory. (Not a tmpfs:
			// runc gives a tmpfs the mode of the directory it covers, and
			// root's ownership.)
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--mount", "type=bind,src="+dir+",dst="+m.MountPath+",options=rbind:rw:nosuid:nodev")
		default:
			t.Fatalf("volume mount %+v of volume %+v: the check knows a read-only ConfigMap and Secret and emptyDirs only", m, v)
		}
	}
	container := fmt.Sprintf("squid-image-check-%d", os.Getpid())
	args = append(args, ref, container)
	args = append(args, c.Command...)
	args = append(args, c.Args...)
	t.Logf("ctr %s", strings.Join(args, " "))

	var out syncBuffer
	run := exec.Command("ctr", args...)
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	exitedEarly := false
	t.Cleanup(func() {
		if exitedEarly {
			return // reported with its output already
		}
		// SIGTERM, as the kubelet stops a container; Squid exits within its
		// shutdown_lifetime.
		kill := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "tasks", "kill", container)
		if b, err := kill.CombinedOutput(); err != nil {
			t.Logf("ctr tasks kill: %v: %s", err, b)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("squid did not exit cleanly on SIGTERM: %v; output:\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = exec.Command("ctr", "-a", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", container).Run()
			t.Errorf("squid still running 30s after SIGTERM; output:\n%s", out.String())
			<-exited
		}
	})

	// Ready as the Pod's readiness probe sees it: the port accepts.
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	testenv.EventuallyNil(t, "squid accepting on "+addr, func() error {
		select {
		case err := <-exited:
			exitedEarly = true
			t.Fatalf("the container exited (%v); output:\n%s", err, out.String())
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})

	// The process runs as nonroot with no capability, on a read-only root.
	pid := taskPID(t, sock, container)
	status := readProc(t, pid, "status")
	for _, want := range []string{
		fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", nonroot),
		fmt.Sprintf("Gid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", nonroot),
		"CapEff:\t0000000000000000",
	} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/%d/status lacks %q:\n%s", pid, want, status)
		}
	}
	if opts := rootMountOptions(t, readProc(t, pid, "mountinfo")); !hasOption(opts, "ro") {
		t.Errorf("the container's / is mounted %q, want read-only", opts)
	}

	// A page through the proxy, and a refused destination with Squid's own
	// error page (the image's templates).
	proxyClient := func(user, password string) *http.Client {
		proxyURL := &url.URL{Scheme: "http", Host: addr}
		if user != "" {
			proxyURL.User = url.UserPassword(user, password)
		}
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 30 * time.Second}
	}
	hc := proxyClient("alice", "first password")
	origin, hits := testenv.CountingOrigin(t, "127.0.0.1", "through the squid image\n", false)
	if code, _ := get(t, proxyClient("", ""), origin.URL+"/"); code != http.StatusProxyAuthRequired || hits.Load() != 0 {
		t.Errorf("GET without credentials: %d, origin hit %d times; want 407 and no hit", code, hits.Load())
	}
	if code, _ := get(t, proxyClient("alice", "wrong"), origin.URL+"/"); code != http.StatusProxyAuthRequired || hits.Load() != 0 {
		t.Errorf("GET with a wrong password: %d, origin hit %d times; want 407 and no hit", code, hits.Load())
	}
	status200, body := get(t, hc, origin.URL+"/index.html")
	if status200 != http.StatusOK || body != "through the squid image\n" || hits.Load() != 1 {
		t.Errorf("GET through squid: %d %q, origin hit %d times; want 200, the page, 1; output:\n%s", status200, body, hits.Load(), out.String())
	}
	denied, deniedHits := testenv.CountingOrigin(t, "127.0.0.2", "must not be reached\n", false)
	code, body := get(t, hc, denied.URL+"/")
	if code != http.StatusForbidden || !strings.Contains(body, "ERR_ACCESS_DENIED") || deniedHits.Load() != 0 {
		t.Errorf("GET of a denied destination: %d, origin hit %d times, body:\n%s\nwant 403 with Squid's ERR_ACCESS_DENIED page and no hit", code, deniedHits.Load(), body)
	}

	// A rotation as the kubelet writes it (the ..data link swapped over a
	// new directory): Squid keeps running, and its helper reads the new
	// file on the next check of a password it has not seen.
	usersDir.write(t, map[string][]byte{"htpasswd": []byte(clientauthtest.File(t, "alice", "second password", "bob", "bob's password"))})
	before := hits.Load()
	for _, c := range []struct{ user, password string }{{"bob", "bob's password"}, {"alice", "second password"}} {
		testenv.EventuallyNil(t, c.user+"'s new password admitted after the rotation", func() error {
			if code, _ := get(t, proxyClient(c.user, c.password), origin.URL+"/"); code != http.StatusOK {
				return fmt.Errorf("status %d", code)
			}
			return nil
		})
	}
	if hits.Load() != before+2 {
		t.Errorf("origin hit %d times after the rotation, want 2", hits.Load()-before)
	}
	if pid2 := taskPID(t, sock, container); pid2 != pid {
		t.Errorf("squid's process changed (%d, was %d): the rotation restarted it", pid2, pid)
	}

	testenv.Eventually(t, "the requests in squid's access log on stdout", func() bool {
		lines, err := squidtest.AccessLines(out.String())
		if err != nil {
			t.Fatal(err)
		}
		_, served := squidtest.FindAccess(lines, map[string]string{"user": "alice", "status": "200", "decision": "allowed", "rule": "entry"})
		_, denied := squidtest.FindAccess(lines, map[string]string{"host": "127.0.0.2", "status": "403", "decision": "refused", "rule": "address"})
		_, noUser := squidtest.FindAccess(lines, map[string]string{"user": "-", "status": "407", "rule": "client-auth"})
		return served && denied && noUser
	})
	t.Logf("squid output:\n%s", out.String())
}

// secretVolume is a Secret volume laid out as the kubelet's atomic writer
// does: the files in a timestamped directory, ..data linking to it, and
// each key a link through ..data; a rotation writes a new directory and
// renames a new ..data link over the old one. Files get the volume's mode
// and the Pod's fsGroup, as the kubelet gives them.
type secretVolume struct {
	dir          string
	mode         os.FileMode
	gid, version int
	// mtime is the modification time of the last file written, as the
	// file system stamped it.
	mtime time.Time
}

func newSecretVolume(t *testing.T, mode int32, fsGroup int64) *secretVolume {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &secretVolume{dir: dir, mode: os.FileMode(mode), gid: int(fsGroup)}
}

func (v *secretVolume) write(t *testing.T, data map[string][]byte) {
	t.Helper()
	// basic_ncsa_auth reads the file again when its modification time, in
	// whole seconds, changed: a rotation written in the second of the last
	// write would go unseen (it did, in CI, where Squid started and
	// answered within that second). The kubelet's writes are seconds apart
	// at the least, so wait until the file system stamps a later second.
	// Its clock, not time.Now: the kernel stamps files from a coarse clock
	// up to a tick behind, so a write just after the second turned could
	// still be stamped with the old one (a rotation went unseen so, one CI
	// run in several: "bob's new password admitted after the rotation: not
	// reached within 1m0s: status 407").
	if !v.mtime.IsZero() {
		v.awaitFileClockPast(t, v.mtime)
	}
	v.version++
	ts := fmt.Sprintf("..2026_12_02_00_00_%02d.%d", v.version, os.Getpid())
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, b := range data {
		f := filepath.Join(v.dir, ts, k)
		if err := os.WriteFile(f, b, v.mode); err != nil {
			t.Fatal(err)
		}
		// WriteFile's mode passes through the umask; the kubelet's does not.
		if err := os.Chmod(f, v.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f, 0, v.gid); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(v.dir, k)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), filepath.Join(v.dir, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k := range data {
		fi, err := os.Stat(filepath.Join(v.dir, ts, k))
		if err != nil {
			t.Fatal(err)
		}
		if !v.mtime.IsZero() && fi.ModTime().Unix() <= v.mtime.Unix() {
			t.Fatalf("%s stamped %v, in the second of the last write (%v): basic_ncsa_auth would not read it", k, fi.ModTime(), v.mtime)
		}
		v.mtime = fi.ModTime()
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, hc *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// taskPID is the host PID of the container's process.
func taskPID(t *testing.T, sock, container string) int {
	t.Helper()
	b, err := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v: %s", err, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == container {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("ctr tasks ls: %q", line)
			}
			return pid
		}
	}
	t.Fatalf("ctr tasks ls lists no %s:\n%s", container, b)
	return 0
}

func readProc(t *testing.T, pid int, file string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rootMountOptions are the per-mount options of the mount at / in a
// mountinfo (field 5 is the mount point, field 6 its options).
func rootMountOptions(t *testing.T, mountinfo string) string {
	t.Helper()
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			return f[5]
		}
	}
	t.Fatalf("no mount at / in mountinfo:\n%s", mountinfo)
	return ""
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// awaitFileClockPast waits until a file written in the volume's directory
// is stamped with a later second than last.
func (v *secretVolume) awaitFileClockPast(t *testing.T, last time.Time) {
	t.Helper()
	probe := filepath.Join(v.dir, "..clock")
	defer os.Remove(probe)
	testenv.EventuallyNil(t, "the file system's clock past "+last.Format(time.RFC3339), func() error {
		_ = os.Remove(probe) // a new file, stamped now
		if err := os.WriteFile(probe, nil, 0o600); err != nil {
			return err
		}
		fi, err := os.Stat(probe)
		if err != nil {
			return err
		}
		if fi.ModTime().Unix() <= last.Unix() {
			return fmt.Errorf("a file written now is stamped %v", fi.ModTime())
		}
		return nil
	})
}
