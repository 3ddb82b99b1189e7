// Command soak is the crash soak (`make soak`, docs/testing.md): it runs
// the operator binary as a child process against a real kube-apiserver and
// etcd, on the kubernetes provider or on the libvirt provider with the
// libvirt test host's real libvirtd (--provider), drives random create /
// spec-change / delete cycles of Proxies while SIGKILLing the operator at
// random moments and restarting it at once, then stops killing, lets the
// operator converge and counts what is left on the backend. The collector
// never runs a deleting pass (--gc-interval and --gc-grace far beyond the
// run, and --gc-dry-run), so what the reconciler leaves behind stays
// visible.
//
// It exits non-zero when a Proxy is stuck, an instance (Pod, Service,
// ConfigMap, NetworkPolicy; domain, overlay, seed ISO) outlived its Proxy,
// or a Proxy has two instances at rest. --inject-leak makes leaks behind
// the operator's back, to show the soak can fail.
//
// The files:
//
//	main.go          flags, the steps of a run, teardown, the report
//	controlplane.go  kube-apiserver, etcd, CRDs, namespaces, providers config
//	manager.go       the operator as a child process: start, SIGKILL, restart, reap
//	cycles.go        the Proxies: cycles of create, spec change, delete; residents
//	census.go        convergence and the count of what is left
//	inject.go        --inject-leak: instances made behind the operator's back
//	backend.go       what a run needs of the soaked provider; per-provider defaults
//	kubernetes.go    the kubernetes provider, with a stand-in kubelet (internal/testenv/kubelet)
//	libvirt.go       the libvirt provider on the libvirt test host (run by libvirt.sh)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

var errInterrupted = errors.New("interrupted")

type options struct {
	provider        string
	manager         string
	crdDir          string
	cycles          int
	seed            uint64
	concurrency     int
	residents       int
	residentMin     time.Duration
	residentMax     time.Duration
	earlyMax        time.Duration
	killMin         time.Duration
	killMax         time.Duration
	cycleTimeout    time.Duration
	convergeTimeout time.Duration
	inject          string
	injectEvery     int
	keep            bool
}

func main() {
	var o options
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	fs.StringVar(&o.provider, "provider", envString("SOAK_PROVIDER", providerKubernetes), "the provider to soak: kubernetes (a stand-in kubelet on the run's API server) or libvirt (the libvirt test host's libvirtd; run inside it by test/soak/libvirt.sh) (env SOAK_PROVIDER)")
	fs.StringVar(&o.manager, "manager", "", "the operator `binary` to run and kill (make soak builds bin/manager)")
	fs.StringVar(&o.crdDir, "crd-dir", "config/crd/bases", "the CRDs to install")
	fs.IntVar(&o.cycles, "cycles", 0, "create/delete cycles of Proxies to run (env SOAK_CYCLES; default 100 on kubernetes, 15 on libvirt)")
	fs.Uint64Var(&o.seed, "seed", uint64(envInt("SOAK_SEED", 0)), "seed of every random choice; 0 picks one (env SOAK_SEED; the run prints it)")
	fs.IntVar(&o.concurrency, "concurrency", 0, "cycles running at once (at most this many cycle Proxies live at once; default 10 on kubernetes, 3 on libvirt)")
	fs.IntVar(&o.residents, "residents", -1, "Proxies that live through the whole run, their spec changed now and then (default 3 on kubernetes, 1 on libvirt)")
	fs.DurationVar(&o.residentMin, "resident-min", 0, "shortest time between two spec changes of a resident (default 5s on kubernetes, 1m30s on libvirt)")
	fs.DurationVar(&o.residentMax, "resident-max", 0, "longest time between two spec changes of a resident (default 20s on kubernetes, 3m on libvirt)")
	fs.DurationVar(&o.earlyMax, "early-max", 0, "longest pause before an early delete, which lands mid-create (default 3s on kubernetes, 20s on libvirt: the create steps and the boot)")
	fs.DurationVar(&o.killMin, "kill-min", 2*time.Second, "shortest time between two SIGKILLs of the operator")
	fs.DurationVar(&o.killMax, "kill-max", 15*time.Second, "longest time between two SIGKILLs of the operator")
	fs.DurationVar(&o.cycleTimeout, "cycle-timeout", 0, "longest wait inside one cycle (for Ready, for the deletion); a cycle past it is left to the final check (default 3m on kubernetes, 15m on libvirt)")
	fs.DurationVar(&o.convergeTimeout, "converge-timeout", 0, "how long the operator may take to converge once the killing stopped (default 3m on kubernetes, 20m on libvirt)")
	fs.StringVar(&o.inject, "inject-leak", "", "make instances behind the operator's back: `behind` (an unrecorded instance with a live Proxy's UID, made just before its deletion: the deletion must find it, so the run passes), `late` (one with a Proxy's UID just after it is gone) or `orphan` (one with the UID of a Proxy that never existed): both must be reported leaked, so the run fails")
	fs.IntVar(&o.injectEvery, "inject-every", 10, "with --inject-leak: in one cycle of this many")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's directory (manager log, etcd data) even when the run passed")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: soak --manager <operator binary> [flags]  (run it with `make soak`)")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	d, known := providerDefaults[o.provider]
	if known {
		o.applyDefaults(d)
	}
	if fs.NArg() > 0 || !known || o.manager == "" || o.cycles < 1 || o.concurrency < 1 || o.residents < 0 ||
		o.residentMin <= 0 || o.residentMax < o.residentMin || o.earlyMax <= 0 || o.killMin <= 0 || o.killMax < o.killMin ||
		(o.inject != "" && o.inject != injectBehind && o.inject != injectLate && o.inject != injectOrphan) || o.injectEvery < 1 {
		fs.Usage()
		os.Exit(2)
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}

	s := newSoak(o)
	err := s.main()
	s.out.mu.Lock() // after the last line on stdout
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("soak PASSED")
}

// applyDefaults fills in the flags left unset with the provider's values.
func (o *options) applyDefaults(d defaults) {
	setInt := func(v *int, unset, def int) {
		if *v == unset {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&o.cycles, 0, envInt("SOAK_CYCLES", d.cycles))
	setInt(&o.concurrency, 0, d.concurrency)
	setInt(&o.residents, -1, d.residents)
	setDur(&o.residentMin, d.residentMin)
	setDur(&o.residentMax, d.residentMax)
	setDur(&o.earlyMax, d.earlyMax)
	setDur(&o.cycleTimeout, d.cycleTimeout)
	setDur(&o.convergeTimeout, d.convergeTimeout)
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return def
	}
	return v
}

// soak holds everything one run starts, so that teardown stops exactly that.
type soak struct {
	opts  options
	out   *printer
	start time.Time
	// tmp holds every file of the run, the control plane's included, so the
	// leftover check knows this run's processes by their command lines.
	tmp     string
	cp      *controlPlane
	mgr     *supervisor
	backend backend

	// injector is the provider --inject-leak creates through, built on
	// first use (cycles inject concurrently).
	injectorOnce sync.Once
	injector     provider.Provider
	injectorErr  error

	stats stats
}

// stats are the run's counters, printed in the report.
type stats struct {
	mu                  sync.Mutex
	cycles              int
	created, deleted    int
	specChanges         int
	injected            int
	injectedUIDs        map[string]bool // the UID marks of the injected instances
	cycleTimeouts       int
	residentSpecChanges int
}

func (st *stats) add(f func(*stats)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f(st)
}

func newSoak(o options) *soak {
	s := &soak{opts: o, out: newPrinter(), start: time.Now()}
	logf.SetLogger(funcr.New(func(prefix, args string) { s.out.say("envtest: %s %s", prefix, args) }, funcr.Options{}))
	return s
}

// rng returns the random source of one actor (the killer, worker 3...),
// derived from the seed so a run's choices repeat with it; timings on the
// machine still differ from run to run.
func (s *soak) rng(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(s.opts.seed, stream)) }

func (s *soak) main() (err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// Caught so a closed stdout fails a write instead of killing the soak
	// before its teardown.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go func() {
		sig := <-sigs
		s.out.say("got %v: stopping", sig)
		cancel()
	}()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
		err = errors.Join(err, s.teardown(err != nil))
	}()
	return s.run(ctx)
}

func (s *soak) run(ctx context.Context) error {
	path, err := exec.LookPath(s.opts.manager)
	if err != nil {
		return fmt.Errorf("manager %q: %w (make soak builds bin/manager)", s.opts.manager, err)
	}
	if s.opts.manager, err = filepath.Abs(path); err != nil {
		return err
	}
	if s.opts.crdDir, err = filepath.Abs(s.opts.crdDir); err != nil {
		return err
	}
	if s.tmp, err = os.MkdirTemp("", "egress-soak-"); err != nil {
		return err
	}
	s.out.say("provider: %s, seed: %d (SOAK_SEED=%d repeats the run's choices), cycles: %d, concurrency: %d, residents: %d (a spec change every %s to %s), early deletes within %s, kill every %s to %s",
		s.opts.provider, s.opts.seed, s.opts.seed, s.opts.cycles, s.opts.concurrency, s.opts.residents, s.opts.residentMin, s.opts.residentMax,
		s.opts.earlyMax, s.opts.killMin, s.opts.killMax)
	if s.opts.inject != "" {
		s.out.say("injecting leaks: %s, in one cycle of %d", s.opts.inject, s.opts.injectEvery)
	}
	if s.backend, err = s.newBackend(); err != nil {
		return err
	}
	if err := s.backend.prepare(ctx); err != nil {
		return err
	}
	if err := s.startControlPlane(); err != nil {
		return err
	}
	if err := s.backend.start(ctx); err != nil {
		return err
	}
	if err := s.startManager(ctx); err != nil {
		return err
	}
	if err := s.drive(ctx); err != nil {
		return err
	}
	s.mgr.stopKilling()
	s.out.say("killing stopped after %d kills; waiting for the operator to converge (at most %s)", s.mgr.kills(), s.opts.convergeTimeout)
	c, err := s.converge(ctx)
	if err != nil {
		return err
	}
	s.report(c)
	return c.verdict()
}

// teardown stops what run started, in reverse order, then checks that
// nothing of it is left running. The run's directory goes too, unless the
// run failed or --keep says otherwise, since it holds the manager's log.
func (s *soak) teardown(failed bool) error {
	if s.tmp == "" {
		return nil
	}
	var errs []error
	if s.mgr != nil {
		errs = append(errs, s.mgr.shutdown())
	}
	if c, ok := s.injector.(io.Closer); ok {
		errs = append(errs, c.Close()) // its create steps, its connections
	}
	if s.backend != nil {
		// After the manager, before the control plane: the kubelet
		// watches the API server; the libvirt host's domains and volumes
		// go once nothing makes more.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		errs = append(errs, s.backend.stop(ctx))
		cancel()
	}
	if s.cp != nil {
		errs = append(errs, s.cp.env.Stop())
	}
	pgid := 0
	if s.mgr != nil {
		pgid = s.mgr.lastPID()
	}
	left, err := childproc.KillLeftovers(s.tmp, pgid)
	switch {
	case errors.Is(err, childproc.ErrNoProcfs):
		s.out.say("no /proc here: the leftover check was skipped")
	case err != nil:
		errs = append(errs, err)
	case len(left) > 0:
		errs = append(errs, fmt.Errorf("still running after teardown (now killed): %v", left))
	default:
		s.out.say("checked: no process refers to %s", s.tmp)
	}
	if failed || s.opts.keep || errors.Join(errs...) != nil {
		s.out.say("kept %s (the manager's log is %s)", s.tmp, filepath.Join(s.tmp, managerLog))
	} else {
		errs = append(errs, os.RemoveAll(s.tmp))
	}
	return errors.Join(errs...)
}
