package childproc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SysProcAttr puts a child in a process group of its own, so a Ctrl-C in
// the terminal reaches only the parent, which stops the child in order;
// Pdeathsig stops the child should the parent itself be killed with no
// chance to tear down.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// List reads every process's group and command line from /proc.
// Processes that exit while it reads are skipped.
func List() ([]Info, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, ErrNoProcfs
	}
	var out []Info
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces and ')'; the
		// fields after its last ')' are: state ppid pgrp ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 3 {
			continue
		}
		if fields[0] == "Z" {
			continue // a zombie runs nothing; its parent reaps it
		}
		pgid, _ := strconv.Atoi(fields[2])
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		out = append(out, Info{PID: pid, PGID: pgid, Cmdline: strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))})
	}
	return out, nil
}

// PeakRSS is a live process's peak resident set size in bytes (VmHWM in
// /proc/<pid>/status): the most memory it held at once since it started.
func PeakRSS(pid int) (int64, error) { return statusBytes(pid, "VmHWM") }

// FileRSS is the part of a live process's resident set that is file
// pages (RssFile): for a Go program, mostly its own binary's. The kernel
// can drop them under memory pressure, unlike the heap.
func FileRSS(pid int) (int64, error) { return statusBytes(pid, "RssFile") }

// statusBytes is the "<field>:   123456 kB" line of /proc/<pid>/status.
func statusBytes(pid int, field string) (int64, error) {
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pid %d: %s %q: %w", pid, field, v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("pid %d: no %s in /proc/%d/status", pid, field, pid)
}
