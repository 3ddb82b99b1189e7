// Command benchfleet is the fleet benchmark (`make bench-fleet`,
// docs/performance.md): on a real kube-apiserver and etcd it measures, for
// N objects at once,
//
//   - the floor: a plain client with no rate limit doing the minimal writes
//     of one Proxy lifecycle (create, add the finalizer, status with an ID,
//     status Ready; delete, remove the finalizer) on a stand-in CRD (the
//     Proxy CRD under another group, which the operator does not watch);
//   - the operator (the manager binary as a child process) on each provider
//     named (local, kubernetes) for N Proxies: time to all Ready and to all
//     gone, apply-to-Ready percentiles, API writes per Proxy from the API
//     server's own request counters, the manager's peak RSS;
//   - the ratio operator/floor of both phases; the floor runs right before
//     each provider, so both see the same machine.
//
// It prints `key: value` lines on stdout and progress on stderr. The files:
//
//	main.go      flags, the steps of a run, teardown
//	floor.go     the stand-in CRD and the floor's lifecycles
//	operator.go  the manager as a child process, the Proxies, their watch
//	writes.go    apiserver_request_total scraped from the API server
//	report.go    percentiles and the key: value lines
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

const (
	providerLocal      = "local"
	providerKubernetes = "kubernetes"
	// proxyNamespace holds the Proxies and the floor's objects,
	// backendNamespace the kubernetes provider's Pods, Services and
	// ConfigMaps.
	proxyNamespace   = "bench"
	backendNamespace = "bench-backend"
)

type options struct {
	manager      string
	crdDir       string
	n            int
	providers    []string
	concurrency  int
	phaseTimeout time.Duration
	managerFlags []string
	// managerMemLimit is the manager's GOMEMLIMIT, set in its environment
	// alone: set for the whole bench it would slow kube-apiserver and
	// etcd (Go programs too) and the floor with them.
	managerMemLimit string
	// managerContainerLimit is the container memory limit the manager is
	// told of (MEMORY_LIMIT, as config/manager/manager.yaml passes
	// limits.memory); it sets its own Go limit from it.
	managerContainerLimit string
	kubeQPS               float64
	keep                  bool
	profileDir            string
}

func main() {
	var o options
	var providers, managerFlags string
	fs := flag.NewFlagSet("benchfleet", flag.ExitOnError)
	fs.StringVar(&o.manager, "manager", "", "the operator `binary` to run (make bench-fleet builds bin/manager)")
	fs.StringVar(&o.crdDir, "crd-dir", "config/crd/bases", "the CRDs to install")
	fs.IntVar(&o.n, "n", envInt("N", 1000), "objects per phase (env N)")
	fs.StringVar(&providers, "providers", envString("PROVIDERS", providerLocal+","+providerKubernetes), "providers to run the operator on, comma-separated: local, kubernetes (env PROVIDERS)")
	fs.IntVar(&o.concurrency, "concurrency", envInt("BENCH_CONCURRENCY", 100), "requests the bench's own client sends at once (the floor's lifecycles, the Proxies' creates and deletes; env BENCH_CONCURRENCY)")
	fs.DurationVar(&o.phaseTimeout, "phase-timeout", 0, "longest wait for one phase (all Ready, all gone); 0 means 5m + 100ms per object")
	fs.StringVar(&managerFlags, "manager-flags", os.Getenv("BENCH_MANAGER_FLAGS"), "more flags for the manager, space-separated, e.g. --kube-api-qps=-1 (env BENCH_MANAGER_FLAGS)")
	fs.StringVar(&o.managerMemLimit, "manager-gomemlimit", os.Getenv("BENCH_MANAGER_GOMEMLIMIT"), "the manager's GOMEMLIMIT, e.g. 128MiB, which wins over -manager-memory-limit; empty: none (env BENCH_MANAGER_GOMEMLIMIT)")
	fs.StringVar(&o.managerContainerLimit, "manager-memory-limit", os.Getenv("BENCH_MANAGER_MEMORY_LIMIT"), "the container memory limit the manager is told of, e.g. 256Mi, as the Deployment passes limits.memory in MEMORY_LIMIT (the manager keeps Go 80Mi under it); empty: none (env BENCH_MANAGER_MEMORY_LIMIT)")
	fs.Float64Var(&o.kubeQPS, "kube-client-qps", envFloat("BENCH_KUBE_CLIENT_QPS", 0), "the kubernetes provider entry's clientQPS (clientBurst twice it); 0 keeps the provider's default (env BENCH_KUBE_CLIENT_QPS)")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's directory (the managers' logs, etcd data)")
	fs.StringVar(&o.profileDir, "profile-dir", os.Getenv("BENCH_PROFILE_DIR"), "save the manager's heap and goroutine profiles, taken once every Proxy is Ready, in this `directory` (env BENCH_PROFILE_DIR)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: benchfleet --manager <operator binary> [flags]  (run it with `make bench-fleet`)")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError
	for _, p := range strings.Split(providers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.providers = append(o.providers, p)
		}
	}
	o.managerFlags = strings.Fields(managerFlags)
	valid := fs.NArg() == 0 && o.manager != "" && o.n > 0 && o.concurrency > 0 && o.kubeQPS >= 0 && len(o.providers) > 0
	for _, p := range o.providers {
		valid = valid && (p == providerLocal || p == providerKubernetes)
	}
	if !valid {
		fs.Usage()
		os.Exit(2)
	}
	if o.phaseTimeout == 0 {
		o.phaseTimeout = 5*time.Minute + time.Duration(o.n)*100*time.Millisecond
	}
	b := &bench{opts: o, out: newReport()}
	logf.SetLogger(funcr.New(func(prefix, args string) { b.progress("envtest: %s %s", prefix, args) }, funcr.Options{}))
	if err := b.main(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-fleet FAILED: %v\n", err)
		os.Exit(1)
	}
}

func envInt(name string, def int) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return def
	}
	return v
}

func envFloat(name string, def float64) float64 {
	v, err := strconv.ParseFloat(os.Getenv(name), 64)
	if err != nil {
		return def
	}
	return v
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// bench holds everything one run starts, so that teardown stops exactly
// that.
type bench struct {
	opts  options
	out   *report
	start time.Time
	// tmp holds every file of the run, the control plane's included, so
	// the leftover check knows this run's processes by their command lines.
	tmp string
	env *testenv.Env
	// kubeconfig is the admin kubeconfig the managers use.
	kubeconfig string
	// mgr is the manager running now, if any; pprofAddr its profiler.
	mgr       *childproc.Child
	pprofAddr string
}

// progress prints one line on stderr with the seconds since the start.
func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s [%7.1fs] %s\n", time.Now().Format("15:04:05"), time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bench) main() (err error) {
	b.start = time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		b.progress("got %v: stopping", sig)
		cancel()
	}()
	defer func() { err = errors.Join(err, b.teardown(err != nil)) }()
	return b.run(ctx)
}

func (b *bench) run(ctx context.Context) error {
	path, err := exec.LookPath(b.opts.manager)
	if err != nil {
		return fmt.Errorf("manager %q: %w (make bench-fleet builds bin/manager)", b.opts.manager, err)
	}
	if b.opts.manager, err = filepath.Abs(path); err != nil {
		return err
	}
	if b.opts.crdDir, err = filepath.Abs(b.opts.crdDir); err != nil {
		return err
	}
	if b.tmp, err = os.MkdirTemp("", "egress-benchfleet-"); err != nil {
		return err
	}
	b.out.put("n", strconv.Itoa(b.opts.n))
	b.out.put("providers", strings.Join(b.opts.providers, ","))
	b.out.put("bench_concurrency", strconv.Itoa(b.opts.concurrency))
	if b.opts.kubeQPS > 0 {
		b.out.float("kubernetes_client_qps", b.opts.kubeQPS)
	}
	b.out.put("manager_extra_flags", fmt.Sprintf("%q", strings.Join(b.opts.managerFlags, " ")))
	if b.opts.managerMemLimit != "" {
		b.out.put("manager_gomemlimit", b.opts.managerMemLimit)
	}
	if b.opts.managerContainerLimit != "" {
		b.out.put("manager_memory_limit", b.opts.managerContainerLimit)
	}
	if b.env, err = childproc.StartControlPlane(b.tmp, b.opts.crdDir, "`make bench-fleet`", b.progress); err != nil {
		return err
	}
	b.out.put("kube_apiserver", b.env.ServerVersion)
	b.kubeconfig = filepath.Join(b.tmp, "kubeconfig")
	if err := b.env.WriteKubeconfig(b.kubeconfig); err != nil {
		return err
	}
	for _, ns := range []string{proxyNamespace, backendNamespace} {
		if err := b.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	fl, err := newFloor(ctx, b)
	if err != nil {
		return err
	}
	if err := fl.warmUp(ctx); err != nil {
		return fmt.Errorf("the floor's warm-up: %w", err)
	}
	for _, p := range b.opts.providers {
		floorFig, err := fl.run(ctx, p)
		if err != nil {
			return fmt.Errorf("the floor before %s: %w", p, err)
		}
		opFig, err := b.runOperator(ctx, p)
		if err != nil {
			return fmt.Errorf("the operator on %s: %w", p, err)
		}
		b.out.ratios(p, floorFig, opFig)
	}
	b.progress("done in %s", time.Since(b.start).Round(time.Second))
	return nil
}

// teardown stops what run started, then checks that nothing of it is left
// running. The run's directory goes too, unless the run failed or --keep.
func (b *bench) teardown(failed bool) error {
	if b.tmp == "" {
		return nil
	}
	var errs []error
	pgid := 0
	if b.mgr != nil {
		pgid = b.mgr.PID
		if !b.mgr.Stop(managerGrace) {
			errs = append(errs, fmt.Errorf("the manager (pid %d) ignored SIGTERM for %s and was killed", b.mgr.PID, managerGrace))
		}
	}
	if b.env != nil {
		errs = append(errs, b.env.Stop())
	}
	left, err := childproc.KillLeftovers(b.tmp, pgid)
	switch {
	case errors.Is(err, childproc.ErrNoProcfs):
		b.progress("no /proc here: the leftover check was skipped")
	case err != nil:
		errs = append(errs, err)
	case len(left) > 0:
		errs = append(errs, fmt.Errorf("still running after teardown (now killed): %v", left))
	default:
		b.progress("checked: no process refers to %s", b.tmp)
	}
	if failed || b.opts.keep || errors.Join(errs...) != nil {
		b.progress("kept %s (the managers' logs are there)", b.tmp)
	} else {
		errs = append(errs, os.RemoveAll(b.tmp))
	}
	return errors.Join(errs...)
}
