// Command demo runs egress-proxies-operator end to end on one machine, with
// no cloud and no hypervisor: a real kube-apiserver and etcd (envtest), the
// operator binary on the embedded local provider, the Proxy of
// config/samples/proxy_local.yaml, and an HTTP fetch through it.
//
// `make demo` runs it interactively: once the fetch worked it prints how to
// look around with kubectl and waits for Ctrl-C. `make demo-check` (--check)
// needs no terminal: it also deletes the Proxy, tears everything down and
// exits 0 only if the fetch returned the origin's answer and nothing it
// started is left running. Teardown runs whatever happens.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

const (
	// managerReadyTimeout bounds the wait for the manager's /readyz; it
	// starts in seconds, so a minute means it is stuck.
	managerReadyTimeout = 60 * time.Second
	// managerGrace is how long the manager gets to stop after SIGTERM
	// before SIGKILL.
	managerGrace = 20 * time.Second
	// deleteTimeout bounds the wait for a deleted Proxy to disappear, that
	// is for the operator to release its finalizer.
	deleteTimeout = 60 * time.Second
	// heartbeat is how often a wait says it is still waiting.
	heartbeat = 5 * time.Second
	// originPrefix starts every answer of the demo origin; the fetch
	// through the proxy must return it.
	originPrefix = "hello from the demo origin, via "
	// defaultNamespace is where a sample without a namespace goes.
	defaultNamespace = "default"
)

var errInterrupted = errors.New("interrupted before the demo finished")

type options struct {
	manager         string
	check           bool
	providersConfig string
	sample          string
	crdDir          string
	readyTimeout    time.Duration
}

func main() {
	var o options
	// A flag set of its own: controller-runtime registers --kubeconfig on
	// the global one, which means nothing here.
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	fs.StringVar(&o.manager, "manager", "", "the operator `binary` to run (make demo builds bin/manager)")
	fs.BoolVar(&o.check, "check", false, "no terminal: fetch once, delete the Proxy, tear down, exit 0 only if all of it worked")
	fs.StringVar(&o.providersConfig, "providers-config", "hack/providers-dev.yaml", "the providers config given to the manager")
	fs.StringVar(&o.sample, "sample", "config/samples/proxy_local.yaml", "the Proxy to apply")
	fs.StringVar(&o.crdDir, "crd-dir", "config/crd/bases", "the CRDs to install")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 2*time.Minute, "how long the Proxy may take to become Ready")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: demo --manager <operator binary> [--check]  (run it with `make demo` or `make demo-check`)")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 || o.manager == "" {
		fs.Usage()
		os.Exit(2)
	}

	d := newDemo(o)
	if err := d.main(); err != nil {
		d.out.mu.Lock() // after the last line on stdout
		fmt.Fprintf(os.Stderr, "demo FAILED: %v\n", err)
		os.Exit(1)
	}
	if o.check {
		d.out.say("OK: the fetch through the proxy returned the origin's answer, the Proxy was deleted, nothing is left running")
	} else {
		d.out.say("stopped; nothing is left running")
	}
}

// demo holds everything one run starts, so that teardown can stop exactly
// that and check that nothing of it is left.
type demo struct {
	opts   options
	out    *printer
	scheme *runtime.Scheme

	// tmp holds every file this run writes, etcd's data and the
	// kube-apiserver's certificates included, so the leftover check can
	// recognise this run's control plane by its command line.
	tmp        string
	assets     string
	env        *envtest.Environment
	kubeconfig string
	c          client.Client

	mgr       *exec.Cmd
	mgrPID    int
	mgrOut    *prefixWriter
	mgrDone   chan struct{} // closed once the manager has exited and been reaped
	mgrErr    error         // how it exited; read only after mgrDone
	probeAddr string

	origin     *http.Server
	originAddr string

	proxy       client.ObjectKey
	created     bool
	deleteTried bool // deleted once already: teardown does not wait again
	proxyGone   bool
	endpoint    string

	fetched bool // the fetch returned 200 and the origin's body

	// force is closed by a second signal: teardown then stops waiting for
	// the operator and stops the processes at once.
	force chan struct{}
}

func newDemo(o options) *demo {
	d := &demo{opts: o, out: newPrinter(), mgrDone: make(chan struct{}), force: make(chan struct{})}
	d.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(d.scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(d.scheme); err != nil {
		panic(err)
	}
	// envtest logs through controller-runtime's logger; without one set it
	// complains after 30 s, and its retries would go unseen.
	logf.SetLogger(funcr.New(func(prefix, args string) {
		d.out.say("envtest: %s %s", prefix, args)
	}, funcr.Options{}))
	return d
}

// main runs the demo and then, whatever happened (an error, a panic, a
// signal), the teardown.
func (d *demo) main() (err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	// Kept for the whole run, so a signal never kills the demo before its
	// teardown; the children have process groups of their own, so a Ctrl-C
	// reaches only this process, which stops them in order.
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		d.out.say("got %v: stopping (again to skip waiting for the operator)", s)
		cancel()
		s = <-sigs
		d.out.say("got %v again: stopping the processes without waiting", s)
		close(d.force)
		for range sigs {
			// Teardown is bounded; let it finish.
		}
	}()

	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
		err = errors.Join(err, d.teardown())
	}()
	err = d.run(ctx)
	if errors.Is(err, errInterrupted) && !d.opts.check && d.fetched {
		// Ctrl-C is how an interactive demo that worked ends.
		return nil
	}
	return err
}

func (d *demo) run(ctx context.Context) error {
	if err := d.checkInputs(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "egress-demo-")
	if err != nil {
		return err
	}
	d.tmp = tmp
	steps := []func(context.Context) error{
		d.startControlPlane,
		d.startManager,
		d.startOrigin,
		d.applySample,
		d.waitReady,
		d.fetch,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return errInterrupted
		}
	}
	if d.opts.check {
		return d.deleteProxy(ctx)
	}
	d.printHowTo()
	select {
	case <-ctx.Done():
		return errInterrupted
	case <-d.mgrDone:
		return fmt.Errorf("the manager exited (%v); its output is above, behind %q", d.mgrErr, managerPrefix)
	}
}

// checkInputs fails early, before anything is started, on what `make demo`
// would have provided.
func (d *demo) checkInputs() error {
	d.assets = os.Getenv("KUBEBUILDER_ASSETS")
	if d.assets == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make demo`, which builds kube-apiserver and etcd and points it at them")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if !isExecutable(filepath.Join(d.assets, bin)) {
			return fmt.Errorf("no %s in KUBEBUILDER_ASSETS=%s: run `make demo` (or `make envtest-assets`)", bin, d.assets)
		}
	}
	path, err := exec.LookPath(d.opts.manager)
	if err != nil {
		return fmt.Errorf("manager %q: %w (run `make demo`, which builds bin/manager)", d.opts.manager, err)
	}
	if d.opts.manager, err = filepath.Abs(path); err != nil {
		return err
	}
	for _, p := range []*string{&d.opts.providersConfig, &d.opts.sample, &d.opts.crdDir} {
		if _, err := os.Stat(*p); err != nil {
			return fmt.Errorf("%w (run the demo from the repository root: `make demo`)", err)
		}
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) startControlPlane(context.Context) error {
	d.out.say("starting kube-apiserver and etcd from %s", d.assets)
	etcdDir, certDir := filepath.Join(d.tmp, "etcd"), filepath.Join(d.tmp, "kube-apiserver")
	for _, dir := range []string{etcdDir, certDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
	}
	d.env = &envtest.Environment{
		BinaryAssetsDirectory: d.assets,
		CRDDirectoryPaths:     []string{d.opts.crdDir},
		ErrorIfCRDPathMissing: true,
		// A loaded 2-core machine can take well over envtest's default
		// 20 s to start the kube-apiserver.
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  20 * time.Second,
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: etcdDir},
			APIServer: &envtest.APIServer{CertDir: certDir},
		},
	}
	started := time.Now()
	cfg, err := d.env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	version := "unknown version"
	if dc, err := discovery.NewDiscoveryClientForConfig(cfg); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			version = v.GitVersion
		}
	}
	d.out.say("control plane up in %.1fs: kube-apiserver %s at %s, CRDs from %s installed",
		time.Since(started).Seconds(), version, cfg.Host, relPath(d.opts.crdDir))

	user, err := d.env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	d.kubeconfig = filepath.Join(d.tmp, "kubeconfig")
	if err := os.WriteFile(d.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	d.c, err = client.New(cfg, client.Options{Scheme: d.scheme})
	return err
}

const managerPrefix = "manager | "

func (d *demo) startManager(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	d.probeAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{
		"--providers-config", d.opts.providersConfig,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", d.probeAddr,
		"--leader-elect=false",
	}
	d.mgrOut = &prefixWriter{p: d.out, prefix: managerPrefix}
	cmd := exec.Command(d.opts.manager, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.kubeconfig)
	// One writer for both streams, so exec copies them through one pipe
	// and their lines keep their order.
	cmd.Stdout, cmd.Stderr = d.mgrOut, d.mgrOut
	cmd.SysProcAttr = childProcAttr()
	// Should the manager leave a child holding its output open, Wait
	// still returns.
	cmd.WaitDelay = 5 * time.Second
	d.out.say("starting the manager: KUBECONFIG=%s %s %s", d.kubeconfig, relPath(d.opts.manager), strings.Join(relArgs(args), " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the manager: %w", err)
	}
	d.mgr, d.mgrPID = cmd, cmd.Process.Pid
	go func() {
		err := cmd.Wait()
		d.mgrOut.Flush()
		d.mgrErr = err
		close(d.mgrDone)
	}()
	return d.waitManagerReady(ctx)
}

func (d *demo) waitManagerReady(ctx context.Context) error {
	u := "http://" + d.probeAddr + "/readyz"
	d.out.say("waiting for the manager's %s", u)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	started := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastBeat := started
	last := "no answer yet"
	for {
		resp, err := hc.Get(u)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				d.out.say("manager ready in %.1fs (pid %d)", time.Since(started).Seconds(), d.mgrPID)
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Since(started) > managerReadyTimeout {
			return fmt.Errorf("the manager was not ready after %s (last: %s); its output is above, behind %q", managerReadyTimeout, last, managerPrefix)
		}
		if time.Since(lastBeat) >= heartbeat {
			lastBeat = time.Now()
			d.out.say("  ... still waiting for /readyz (%.0fs; last: %s)", time.Since(started).Seconds(), last)
		}
		select {
		case <-ctx.Done():
			return errInterrupted
		case <-d.mgrDone:
			return fmt.Errorf("the manager exited before it was ready (%v); its output is above, behind %q", d.mgrErr, managerPrefix)
		case <-tick.C:
		}
	}
}

// startOrigin starts the server the demo fetches through the proxy; its
// answer names who connected, so the output shows the proxy in the path.
func (d *demo) startOrigin(context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.originAddr = ln.Addr().String()
	d.origin = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			via := r.Header.Get("X-Forwarded-For")
			if via == "" {
				via = r.RemoteAddr
			}
			d.out.say("origin: %s %s from %s", r.Method, r.URL.RequestURI(), r.RemoteAddr)
			_, _ = fmt.Fprintf(w, "%s%s\n", originPrefix, via)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = d.origin.Serve(ln) }()
	d.out.say("origin server on http://%s/", d.originAddr)
	return nil
}

func (d *demo) applySample(ctx context.Context) error {
	data, err := os.ReadFile(d.opts.sample)
	if err != nil {
		return err
	}
	// Strict, so a typo in the sample fails here rather than being dropped.
	obj, gvk, err := serializer.NewCodecFactory(d.scheme, serializer.EnableStrict).UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding %s: %w", relPath(d.opts.sample), err)
	}
	p, ok := obj.(*v1alpha1.Proxy)
	if !ok {
		return fmt.Errorf("%s holds a %s; the demo needs one Proxy", relPath(d.opts.sample), gvk.Kind)
	}
	if p.Namespace == "" {
		p.Namespace = defaultNamespace
	}
	if err := d.c.Create(ctx, p); err != nil {
		return fmt.Errorf("creating the Proxy from %s: %w", relPath(d.opts.sample), err)
	}
	d.proxy, d.created = client.ObjectKeyFromObject(p), true
	d.out.say("applied %s: Proxy %s (provider %q, port %d, allowedSourceRanges %v)",
		relPath(d.opts.sample), d.proxy, p.Spec.Provider, p.Spec.Port, p.Spec.AllowedSourceRanges)
	return nil
}

func (d *demo) waitReady(ctx context.Context) error {
	err := d.follow(ctx, "Ready", d.opts.readyTimeout, func(p *v1alpha1.Proxy) (bool, error) {
		if p == nil {
			return false, errors.New("the Proxy disappeared")
		}
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil {
			return false, nil
		}
		// These two wait for something the demo will not do (change the
		// spec or the providers config): waiting longer shows nothing new.
		if c.Status != metav1.ConditionTrue && (c.Reason == v1alpha1.ReasonPermanentFailure || c.Reason == v1alpha1.ReasonProviderNotFound) {
			return false, fmt.Errorf("the Proxy failed: Ready=%s %s: %s", c.Status, c.Reason, c.Message)
		}
		if c.Status == metav1.ConditionTrue && p.Status.Endpoint != "" {
			d.endpoint = p.Status.Endpoint
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	d.out.say("Proxy %s is Ready at %s", d.proxy, d.endpoint)
	return nil
}

// fetch gets the origin through the proxy. A few tries, because Ready may
// be reported a moment before a listener takes connections.
func (d *demo) fetch(ctx context.Context) error {
	proxyURL := &url.URL{Scheme: "http", Host: d.endpoint}
	target := "http://" + d.originAddr + "/"
	hc := &http.Client{
		Timeout: 10 * time.Second,
		// No keep-alive: an idle connection would hold the proxy's
		// listener busy when the Proxy is deleted.
		Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true},
	}
	d.out.say("GET %s through the proxy at %s", target, proxyURL)
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		if attempt > 1 {
			select {
			case <-ctx.Done():
				return errInterrupted
			case <-time.After(time.Second):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			lastErr = err
			d.out.say("  attempt %d: %v", attempt, err)
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if err != nil {
			lastErr = err
			d.out.say("  attempt %d: reading the body: %v", attempt, err)
			continue
		}
		d.out.say("  %s", resp.Status)
		d.out.say("  body: %s", strings.TrimSpace(string(body)))
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), originPrefix) {
			return fmt.Errorf("the fetch through the proxy returned %s %q, not 200 and the origin's answer", resp.Status, strings.TrimSpace(string(body)))
		}
		d.fetched = true
		return nil
	}
	return fmt.Errorf("fetching %s through the proxy at %s: %w", target, d.endpoint, lastErr)
}

func (d *demo) printHowTo() {
	kubectl := "kubectl"
	if k := filepath.Join(d.assets, "kubectl"); isExecutable(k) {
		kubectl = k
	}
	k := kubectl + " --kubeconfig " + d.kubeconfig
	lines := []string{
		"",
		"The operator is running. The admin kubeconfig is " + d.kubeconfig + "; in another terminal:",
		"",
		"  " + k + " get proxies -o wide",
		"  " + k + " describe proxy -n " + d.proxy.Namespace + " " + d.proxy.Name,
		"  " + k + " get providerhealths",
		"  curl -s -x http://" + d.endpoint + " http://" + d.originAddr + "/",
		"",
		"More Proxies: copy " + relPath(d.opts.sample) + " under another name, then",
		"  " + k + " apply -f <file>",
		"",
		"Ctrl-C deletes the Proxy and stops everything.",
		"",
	}
	d.out.raw(strings.Join(lines, "\n") + "\n")
}

// deleteProxy deletes the Proxy and waits until it is gone, which proves
// that the operator released its finalizer.
func (d *demo) deleteProxy(ctx context.Context) error {
	d.deleteTried = true
	p := &v1alpha1.Proxy{}
	if err := d.c.Get(ctx, d.proxy, p); err != nil {
		if apierrors.IsNotFound(err) {
			d.proxyGone = true
			return nil
		}
		return fmt.Errorf("reading the Proxy: %w", err)
	}
	finalizers := p.Finalizers
	d.out.say("deleting Proxy %s (finalizers %v)", d.proxy, finalizers)
	if err := d.c.Delete(ctx, p); err != nil {
		if apierrors.IsNotFound(err) {
			d.proxyGone = true
			return nil
		}
		return fmt.Errorf("deleting the Proxy: %w", err)
	}
	started := time.Now()
	err := d.follow(ctx, "gone", deleteTimeout, func(p *v1alpha1.Proxy) (bool, error) {
		return p == nil, nil
	})
	if err != nil {
		return err
	}
	d.proxyGone = true
	if len(finalizers) == 0 {
		d.out.say("Proxy %s is gone after %.1fs; it had no finalizer", d.proxy, time.Since(started).Seconds())
		if d.opts.check && d.fetched {
			// A Ready Proxy without one would leave its instance behind
			// when deleted: the deletion proved nothing.
			return fmt.Errorf("Proxy %s was Ready without a finalizer, so its deletion proves nothing", d.proxy)
		}
		return nil
	}
	d.out.say("Proxy %s is gone after %.1fs: the operator released its finalizer", d.proxy, time.Since(started).Seconds())
	if d.endpoint == "" || !d.opts.check {
		return nil
	}
	return d.checkEndpointClosed(ctx)
}

// checkEndpointClosed fails if the deleted Proxy's endpoint still takes
// connections: the operator dropped the finalizer only once the provider
// said the instance was gone, so its listener must be closed.
func (d *demo) checkEndpointClosed(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", d.endpoint, time.Second)
		if err != nil {
			d.out.say("checked: %s refuses connections now", d.endpoint)
			return nil
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("Proxy %s is gone but %s still accepts connections", d.proxy, d.endpoint)
		}
		select {
		case <-ctx.Done():
			return errInterrupted
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// follow polls the Proxy until done says so, printing a line whenever its
// phase or Ready condition changes and a heartbeat in between; what ("Ready",
// "gone") names the goal in messages. done gets nil once the Proxy no longer
// exists.
func (d *demo) follow(ctx context.Context, what string, timeout time.Duration, done func(*v1alpha1.Proxy) (bool, error)) error {
	started := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastBeat, lastState := started, ""
	var last *v1alpha1.Proxy
	for {
		var p *v1alpha1.Proxy
		got := &v1alpha1.Proxy{}
		switch err := d.c.Get(ctx, d.proxy, got); {
		case err == nil:
			p, last = got, got
		case apierrors.IsNotFound(err):
		case ctx.Err() != nil:
			return errInterrupted
		default:
			return fmt.Errorf("reading Proxy %s: %w", d.proxy, err)
		}
		state := "gone"
		if p != nil {
			state = summary(p)
		}
		if state != lastState {
			d.out.say("Proxy %s: %s", d.proxy, state)
			lastState, lastBeat = state, time.Now()
		}
		if ok, err := done(p); err != nil {
			return err
		} else if ok {
			return nil
		}
		if time.Since(started) > timeout {
			d.out.say("Proxy %s still not %s after %s; last seen:\n%s", d.proxy, what, timeout, details(last))
			return fmt.Errorf("Proxy %s was not %s within %s (its conditions are printed above)", d.proxy, what, timeout)
		}
		if time.Since(lastBeat) >= heartbeat {
			lastBeat = time.Now()
			d.out.say("  ... waiting for Proxy %s to be %s (%.0fs of %s)", d.proxy, what, time.Since(started).Seconds(), timeout)
		}
		select {
		case <-ctx.Done():
			return errInterrupted
		case <-d.mgrDone:
			return fmt.Errorf("the manager exited (%v) while waiting for Proxy %s to be %s; its output is above, behind %q", d.mgrErr, d.proxy, what, managerPrefix)
		case <-tick.C:
		}
	}
}

// summary is the part of a Proxy's state whose changes are worth a line.
func summary(p *v1alpha1.Proxy) string {
	s := "phase=" + orNone(string(p.Status.Phase))
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		s += fmt.Sprintf(" Ready=%s reason=%s", c.Status, c.Reason)
		if c.Message != "" {
			s += fmt.Sprintf(" (%s)", c.Message)
		}
	} else {
		s += " Ready=(none yet)"
	}
	if p.Status.Endpoint != "" {
		s += " endpoint=" + p.Status.Endpoint
	}
	if p.DeletionTimestamp != nil {
		s += fmt.Sprintf(" deleting, finalizers=%v", p.Finalizers)
	}
	return s
}

// details is what a timeout reports: every condition and the finalizers.
func details(p *v1alpha1.Proxy) string {
	if p == nil {
		return "never read"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  phase=%s providerID=%s endpoint=%s finalizers=%v conditions:",
		orNone(string(p.Status.Phase)), orNone(p.Status.ProviderID), orNone(p.Status.Endpoint), p.Finalizers)
	if len(p.Status.Conditions) == 0 {
		b.WriteString(" none (has the operator seen the Proxy at all?)")
	}
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "\n    %s=%s reason=%s since %s: %s", c.Type, c.Status, c.Reason, c.LastTransitionTime.Format(time.RFC3339), c.Message)
	}
	return b.String()
}

// teardown stops what run started, in reverse order, each step bounded and
// protected from the others' failures, then checks nothing is left.
func (d *demo) teardown() error {
	if d.tmp == "" {
		return nil // nothing was started
	}
	d.out.say("tearing down")
	var errs []error
	step := func(name string, f func() error) {
		defer func() {
			if r := recover(); r != nil {
				errs = append(errs, fmt.Errorf("%s: panic: %v", name, r))
			}
		}()
		if err := f(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if d.created && !d.deleteTried {
		step("deleting the Proxy", d.teardownProxy)
	}
	if d.mgr != nil {
		step("stopping the manager", d.stopManager)
	}
	if d.origin != nil {
		step("stopping the origin", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return d.origin.Shutdown(ctx)
		})
	}
	if d.env != nil {
		step("stopping the control plane", func() error {
			started := time.Now()
			if err := d.env.Stop(); err != nil {
				return err
			}
			d.out.say("control plane stopped in %.1fs", time.Since(started).Seconds())
			return nil
		})
	}
	step("checking that nothing is left running", d.checkNothingLeft)
	step("removing "+d.tmp, func() error { return os.RemoveAll(d.tmp) })
	return errors.Join(errs...)
}

// teardownProxy deletes the Proxy while the operator still runs, so its
// finalizer is released as a user would see it. It waits only while the
// manager is alive and no second signal came.
func (d *demo) teardownProxy() error {
	select {
	case <-d.mgrDone:
		d.out.say("the manager is not running: not deleting Proxy %s (its finalizer would stay)", d.proxy)
		return nil
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-d.force:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := d.deleteProxy(ctx)
	if errors.Is(err, errInterrupted) {
		d.out.say("not waiting for Proxy %s to go", d.proxy)
		return nil
	}
	return err
}

// stopManager sends SIGTERM to the manager's process group, then SIGKILL
// after managerGrace (or at once after a second signal).
func (d *demo) stopManager() error {
	select {
	case <-d.mgrDone:
		d.out.say("the manager had already exited (%s)", exitString(d.mgrErr))
		return nil
	default:
	}
	grace, force := managerGrace, d.force
	select {
	case <-d.force:
		// A second signal came already: a short grace only.
		grace, force = 2*time.Second, nil
	default:
	}
	d.out.say("stopping the manager (SIGTERM to pid %d, SIGKILL after %s)", d.mgrPID, grace)
	started := time.Now()
	_ = syscall.Kill(-d.mgrPID, syscall.SIGTERM)
	select {
	case <-d.mgrDone:
		d.out.say("manager stopped in %.1fs (%s)", time.Since(started).Seconds(), exitString(d.mgrErr))
		return nil
	case <-time.After(grace):
		d.out.say("manager still running %s after SIGTERM: SIGKILL", grace)
	case <-force:
		d.out.say("second signal: SIGKILL to the manager")
		grace = 0
	}
	_ = syscall.Kill(-d.mgrPID, syscall.SIGKILL)
	select {
	case <-d.mgrDone:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("manager pid %d still there 10s after SIGKILL", d.mgrPID)
	}
	if grace == managerGrace {
		return fmt.Errorf("the manager ignored SIGTERM for %s and was killed", managerGrace)
	}
	return nil
}

// checkNothingLeft fails if the manager, anything in its process group, or
// any process whose command line names this run's temporary directory (the
// kube-apiserver and etcd) still runs. What it finds it kills, by PID, so a
// failed run leaves a clean machine.
func (d *demo) checkNothingLeft() error {
	var left []string
	if d.mgrPID > 0 && syscall.Kill(d.mgrPID, 0) == nil {
		left = append(left, fmt.Sprintf("the manager (pid %d)", d.mgrPID))
		_ = syscall.Kill(d.mgrPID, syscall.SIGKILL)
	}
	procs, err := listProcesses()
	if errors.Is(err, errNoProcfs) {
		d.out.say("no /proc here: only the manager's PID was checked")
		return nil
	}
	if err != nil {
		return err
	}
	self := os.Getpid()
	for _, p := range procs {
		if p.pid == self {
			continue
		}
		if (d.mgrPID > 0 && p.pgid == d.mgrPID) || strings.Contains(p.cmdline, d.tmp) {
			left = append(left, fmt.Sprintf("pid %d: %s", p.pid, truncate(p.cmdline, 160)))
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("still running after teardown (now killed): %s", strings.Join(left, "; "))
	}
	if d.mgrPID > 0 {
		d.out.say("checked: the manager (pid %d) is gone, and no process refers to %s", d.mgrPID, d.tmp)
	} else {
		d.out.say("checked: no process refers to %s", d.tmp)
	}
	return nil
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// relPath shortens paths under the working directory for display.
func relPath(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func relArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if filepath.IsAbs(a) {
			a = relPath(a)
		}
		out[i] = a
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
