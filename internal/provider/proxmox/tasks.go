package proxmox

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// upidNode is the node a task runs on, from its UPID
// ("UPID:<node>:<pid>:..."): not always the node of the call that started
// it (an upload to another node's storage runs on the node that received
// it, which copies the file over), and its status is read there.
func upidNode(upid string) string {
	f := strings.SplitN(upid, ":", 3)
	if len(f) < 3 || f[0] != "UPID" {
		return ""
	}
	return f[1]
}

// wait follows a task until it ends, reporting progress.
func (p *Provider) wait(ctx context.Context, node, upid, what string, progress func(string)) error {
	if upid == "" {
		return nil
	}
	if n := upidNode(upid); n != "" {
		node = n
	}
	t := time.NewTicker(p.taskPoll)
	defer t.Stop()
	detail, logRead := what+" task running", 0
	for poll := 0; ; poll++ {
		ts, err := p.api.task(ctx, node, upid)
		if err != nil {
			return err
		}
		if ts.Status == "stopped" {
			err := classifyTask(what, ts.ExitStatus)
			if err != nil {
				logger(ctx).V(1).Info(taskFailLine, "node", node, "task", what, "upid", upid, "exitStatus", ts.ExitStatus)
			}
			return err
		}
		if what == "clone" && poll%progressEvery == 0 {
			// Only a full clone logs its copy's percentage; a progress
			// read that fails leaves the last one (the status decides).
			if lines, err := p.api.taskLog(ctx, node, upid, logRead); err == nil {
				logRead += len(lines)
				for i := len(lines) - 1; i >= 0; i-- {
					if m := pctRE.FindStringSubmatch(lines[i]); m != nil {
						detail = fmt.Sprintf("clone task %s%%", m[1])
						break
					}
				}
			}
		}
		progress(detail)
		select {
		case <-ctx.Done():
			return provider.Errorf(provider.ErrTransient, "%s task %s: %w", what, upid, ctx.Err())
		case <-t.C:
		}
	}
}

// progressEvery is how many status polls pass between reads of a clone's
// log for its percentage: the reconciler writes progress at most every
// 10 s, so reading it every second doubled a clone's requests for nothing.
const progressEvery = 5

var pctRE = regexp.MustCompile(`\(([0-9]+)(?:\.[0-9]+)?%\)`)

// waitUnlocked waits out a VM lock in the background; a clone lock that
// never clears is reported with the VMID and the qm unlock hint.
func (p *Provider) waitUnlocked(ctx context.Context, vmid int, progress func(string)) (resource, error) {
	t := time.NewTicker(p.taskPoll)
	defer t.Stop()
	start := time.Now()
	logged := false
	for {
		rs, err := p.resources(ctx, true)
		if err != nil {
			return resource{}, err
		}
		r, ok := find(rs, vmid)
		if !ok {
			return resource{}, provider.Errorf(provider.ErrNotFound, "VM %d is gone", vmid)
		}
		if r.Lock == "" || r.Lock == "suspended" {
			return r, nil
		}
		if time.Since(start) > 10*time.Minute {
			return r, provider.Errorf(provider.ErrTransient, "VM %d is still locked (%s) after %s; if no task runs on it, clear it with `qm unlock %d` on node %s", vmid, r.Lock, time.Since(start).Round(time.Second), vmid, r.Node)
		}
		if !logged {
			logger(ctx).V(1).Info(lockWaitLine, "vmid", vmid, "node", r.Node, "lock", r.Lock)
			logged = true
		}
		progress(fmt.Sprintf("VM %d locked (%s); waiting (qm unlock %d if it never clears)", vmid, r.Lock, vmid))
		select {
		case <-ctx.Done():
			return resource{}, provider.Errorf(provider.ErrTransient, "waiting for VM %d lock: %w", vmid, ctx.Err())
		case <-t.C:
		}
	}
}
