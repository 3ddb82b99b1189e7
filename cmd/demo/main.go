// Command demo runs egress-proxies-operator end to end on one machine, with
// no cloud and no hypervisor: a real kube-apiserver and etcd (started by
// internal/testenv, the same way the tests start them), the operator binary
// on the embedded local provider, the Proxy of
// config/samples/proxy_local.yaml, and an HTTP fetch through it.
//
// `make demo` runs it interactively: once the fetch worked it prints how to
// look around with kubectl and waits for Ctrl-C. `make demo-check` (--check)
// needs no terminal: it also deletes the Proxy, tears everything down and
// exits 0 only if the fetch returned the origin's answer and nothing it
// started is left running. Teardown runs whatever happens.
//
// The files, in the order a run goes through them:
//
//	main.go          flags, the steps of a run, teardown
//	controlplane.go  kube-apiserver, etcd and the CRDs (internal/testenv)
//	manager.go       the operator as a child process: start, ready, stop, reap
//	proxy.go         the Proxy: apply the sample, follow it to Ready, delete it
//	check.go         the origin, the fetch through the proxy, the checks after teardown
//	output.go        one printer for the demo's lines; the manager's log to a
//	                 file, its warnings and errors to the screen
//	providers.yaml   the providers config the manager gets
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// heartbeat is how often a wait says it is still waiting.
const heartbeat = 5 * time.Second

var (
	errInterrupted = errors.New("interrupted before the demo finished")
	errTimedOut    = errors.New("timed out")
)

type options struct {
	manager         string
	check           bool
	providersConfig string
	managerLog      string
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
	fs.StringVar(&o.providersConfig, "providers-config", "cmd/demo/providers.yaml", "the providers config given to the manager")
	fs.StringVar(&o.managerLog, "manager-log", "bin/demo-manager.log", "the `file` the manager's log goes to, all of it (the screen shows its warnings and errors)")
	fs.StringVar(&o.sample, "sample", "config/samples/proxy_local.yaml", "the Proxy to apply")
	fs.StringVar(&o.crdDir, "crd-dir", "config/crd/bases", "the CRDs to install")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 2*time.Minute, "how long the Proxy may take to become Ready")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: demo --manager <operator binary> [--check]  (run it with `make demo` or `make demo-check`)")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError: Parse exits on a bad flag
	if fs.NArg() > 0 || o.manager == "" {
		fs.Usage()
		os.Exit(2)
	}

	d := newDemo(o)
	if err := d.main(); err != nil {
		d.out.mu.Lock() // after the last line on stdout
		fmt.Fprintf(os.Stderr, "demo FAILED: %v\n", err)
		fmt.Fprint(os.Stderr, d.managerLogNote())
		os.Exit(1)
	}
	if o.check {
		d.out.say("OK: the fetch through the proxy returned the origin's answer, the Proxy was deleted, nothing is left running")
	} else {
		d.out.say("stopped; nothing is left running")
	}
	d.out.raw(d.managerLogNote())
}

// demo holds everything one run starts, so that teardown can stop exactly
// that and check that nothing of it is left.
type demo struct {
	opts options
	out  *printer

	// tmp holds every file this run writes, etcd's data and the
	// kube-apiserver's certificates included, so the leftover check can
	// recognise this run's control plane by its command line.
	tmp string
	cp  *controlPlane
	mgr *managerProcess

	origin *origin
	proxy  *proxyState

	fetched bool // the fetch returned 200 and the origin's body

	// force is closed by a second signal: teardown then stops waiting for
	// the operator and stops the processes at once.
	force chan struct{}
}

func newDemo(o options) *demo {
	d := &demo{opts: o, out: newPrinter(), force: make(chan struct{})}
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
	// teardown; the manager has a process group of its own, so a Ctrl-C
	// reaches only this process, which stops everything in order.
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// A closed stdout (`make demo | tee log`, the tee stopped by the same
	// Ctrl-C) would otherwise kill the demo with SIGPIPE on its next line,
	// before teardown, leaving etcd and kube-apiserver running: caught,
	// SIGPIPE makes the write fail instead, and the printer carries on.
	// Caught rather than ignored, so the children get the default again.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
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

// run is the demo's story, one step after the other.
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
	case <-d.mgr.done:
		return d.mgr.exitedError("while the demo waited for Ctrl-C")
	}
}

// checkInputs fails early, before anything is started, on what `make demo`
// would have provided. The control plane's binaries are testenv's to find.
func (d *demo) checkInputs() error {
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

// managerLogNote is the last line of a run that started the manager: where
// its whole log is.
func (d *demo) managerLogNote() string {
	if d.mgr == nil {
		return ""
	}
	return "the manager's log: " + relPath(d.mgr.logPath) + "\n"
}

func (d *demo) printHowTo() {
	k := d.cp.kubectl() + " --kubeconfig " + d.cp.kubeconfig
	lines := []string{
		"",
		"The operator is running. The admin kubeconfig is " + d.cp.kubeconfig + "; in another terminal:",
		"",
		"  " + k + " get proxies -o wide",
		"  " + k + " describe proxy -n " + d.proxy.key.Namespace + " " + d.proxy.key.Name,
		"  " + k + " get providerhealths",
		"  curl -s -x http://" + d.proxy.endpoint + " " + d.origin.url(),
		"",
		"More Proxies: copy " + relPath(d.opts.sample) + " under another name, then",
		"  " + k + " apply -f <file>",
		"",
		"Ctrl-C deletes the Proxy and stops everything.",
		"",
	}
	d.out.raw(strings.Join(lines, "\n") + "\n")
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
	if d.proxy != nil && !d.proxy.deleteTried {
		step("deleting the Proxy", d.teardownProxy)
	}
	if d.mgr != nil {
		step("stopping the manager", func() error { return d.mgr.stop(d.force) })
	}
	if d.origin != nil {
		step("stopping the origin", d.origin.stop)
	}
	if d.cp != nil {
		step("stopping the control plane", d.cp.stop)
	}
	step("checking that nothing is left running", d.checkNothingLeft)
	step("removing "+d.tmp, func() error { return os.RemoveAll(d.tmp) })
	return errors.Join(errs...)
}

// fatalError is an error of a poll's check that ends the wait at once.
type fatalError struct{ error }

func fatal(err error) error { return fatalError{err} }

// poll calls check every 250 ms until it returns nil, as
// testenv.EventuallyNil does in the tests: an error is what is still
// missing, the last one is reported once timeout passed (wrapping
// errTimedOut), and one made with fatal ends the wait at once. The wait
// also ends when ctx does (errInterrupted) and when the manager exits,
// since nothing the demo waits for happens without it.
func (d *demo) poll(ctx context.Context, what string, timeout time.Duration, check func() error) error {
	started := time.Now()
	lastBeat := started
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var managerDone <-chan struct{}
	if d.mgr != nil {
		managerDone = d.mgr.done
	}
	for {
		err := check()
		if err == nil {
			return nil
		}
		if f := (fatalError{}); errors.As(err, &f) {
			return f.error
		}
		if ctx.Err() != nil {
			return errInterrupted
		}
		if time.Since(started) > timeout {
			return fmt.Errorf("%w: %s not within %s (last: %v)", errTimedOut, what, timeout, err)
		}
		if time.Since(lastBeat) >= heartbeat {
			lastBeat = time.Now()
			d.out.say("  ... still waiting for %s (%.0fs of %s; last: %v)", what, time.Since(started).Seconds(), timeout, err)
		}
		select {
		case <-ctx.Done():
			return errInterrupted
		case <-managerDone:
			return d.mgr.exitedError("while waiting for " + what)
		case <-tick.C:
		}
	}
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
