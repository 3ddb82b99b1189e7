// Command manager runs the egress-proxies-operator.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/operator"
)

func main() {
	var o operator.Options
	o.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	o.PodName, o.PodNamespace = os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")

	err := setGoMemoryLimit()
	if err == nil {
		err = run(o)
	}
	if err != nil {
		// Plain text, no stack trace: these are mostly configuration errors
		// a human reads at start.
		fmt.Fprintln(os.Stderr, "egress-proxies-operator:", err)
		os.Exit(1)
	}
}

// setGoMemoryLimit keeps the Go runtime goMemoryReserve under the
// container's memory limit (config/manager/manager.yaml passes it in
// MEMORY_LIMIT).
func setGoMemoryLimit() error {
	n, err := goMemoryLimit(os.Getenv("GOMEMLIMIT"), os.Getenv("MEMORY_LIMIT"))
	if err != nil || n == 0 {
		return err
	}
	debug.SetMemoryLimit(n)
	ctrl.Log.WithName("setup").Info("Go memory limit set", "bytes", n, "containerLimit", os.Getenv("MEMORY_LIMIT"), "reserve", goMemoryReserve)
	return nil
}

func run(o operator.Options) error {
	ctx := ctrl.SetupSignalHandler()
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	op, err := operator.New(ctx, cfg, o)
	if err != nil {
		return err
	}
	return op.Run(ctx)
}
