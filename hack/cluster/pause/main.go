// Command pause is the e2e cluster's sandbox ("pause") container: it holds
// a Pod's namespaces open and does nothing else. No registry is reachable
// here, so containerd's default registry.k8s.io/pause cannot be pulled;
// hack/cluster/images.sh builds this static binary into a local image.
//
// As PID 1 of the sandbox it exits on SIGTERM or SIGINT (PID 1 gets no
// default signal handling, so it must ask for them) and reaps any child
// that is re-parented to it, as the upstream pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren collects every exited child without blocking.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
