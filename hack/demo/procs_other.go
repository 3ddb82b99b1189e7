//go:build unix && !linux

package main

import (
	"errors"
	"syscall"
)

// childProcAttr puts the manager in a process group of its own, so a Ctrl-C
// in the terminal reaches only the demo, which deletes the Proxy while the
// operator still runs and then stops it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

var errNoProcfs = errors.New("no /proc")

type procInfo struct {
	pid, pgid int
	cmdline   string
}

// listProcesses needs /proc; elsewhere only the manager's PID is checked.
func listProcesses() ([]procInfo, error) { return nil, errNoProcfs }
