// Package childproc is what the commands that run the operator and a
// control plane as child processes (cmd/demo, test/soak, test/benchfleet)
// share about them: a process group of its own for each child, and the
// check after teardown that none of them is left. It lives under
// internal/testenv, with the control plane it starts, so that cmd/demo
// imports no test suite and the operator binary none of it.
package childproc

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// ErrNoProcfs says List cannot see other processes here.
var ErrNoProcfs = errors.New("no /proc")

// Info is one process as /proc shows it.
type Info struct {
	PID, PGID int
	Cmdline   string
}

// KillLeftovers finds every process, other than this one, in one of the
// process groups pgids or whose command line names dir (a run's temporary
// directory, which the control plane's command lines hold), kills each by
// PID, and returns them for the report. ErrNoProcfs means it could not look.
func KillLeftovers(dir string, pgids ...int) ([]string, error) {
	procs, err := List()
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var left []string
	for _, p := range procs {
		if p.PID == self {
			continue
		}
		inGroup := false
		for _, g := range pgids {
			inGroup = inGroup || (g > 0 && p.PGID == g)
		}
		if inGroup || (dir != "" && strings.Contains(p.Cmdline, dir)) {
			left = append(left, fmt.Sprintf("pid %d: %s", p.PID, truncate(p.Cmdline, 160)))
			_ = syscall.Kill(p.PID, syscall.SIGKILL) // reported either way
		}
	}
	return left, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
