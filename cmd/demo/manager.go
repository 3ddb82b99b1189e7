package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

const (
	// managerReadyTimeout bounds the wait for the manager's /readyz; it
	// starts in seconds, so a minute means it is stuck.
	managerReadyTimeout = 60 * time.Second
	// managerGrace is how long the manager gets to stop after SIGTERM
	// before SIGKILL.
	managerGrace = 20 * time.Second
	// managerPrefix starts every line the screen shows of the manager's.
	managerPrefix = "manager | "
)

// managerProcess is the operator binary run as a child, in a process group
// of its own. One goroutine waits for it, so it is reaped as soon as it
// exits, and done tells everyone else.
type managerProcess struct {
	out     *printer
	cmd     *exec.Cmd
	pid     int
	logPath string        // everything it wrote, the screen shows a part
	done    chan struct{} // closed once the process has exited and been reaped
	err     error         // how it exited; read only after done
}

func (d *demo) startManager(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	probeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{
		"--providers-config", d.opts.providersConfig,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", probeAddr,
		"--leader-elect=false",
	}
	logPath, err := filepath.Abs(d.opts.managerLog)
	if err != nil {
		return err
	}
	out, err := newManagerOutput(d.out, managerPrefix, logPath)
	if err != nil {
		return fmt.Errorf("the manager's log: %w", err)
	}
	cmd := exec.Command(d.opts.manager, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.cp.kubeconfig)
	// One writer for both streams, so exec copies them through one pipe
	// and their lines keep their order.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childproc.SysProcAttr()
	// Should the manager leave a child holding its output open, Wait
	// still returns.
	cmd.WaitDelay = 5 * time.Second
	d.out.say("starting the manager: KUBECONFIG=%s %s %s", d.cp.kubeconfig, relPath(d.opts.manager), strings.Join(relArgs(args), " "))
	d.out.say("the manager's log, all of it (JSON): %s; its warnings and errors show here, behind %q", relPath(logPath), managerPrefix)
	if err := cmd.Start(); err != nil {
		_ = out.Close() // empty: nothing ran
		return fmt.Errorf("starting the manager: %w", err)
	}
	m := &managerProcess{out: d.out, cmd: cmd, pid: cmd.Process.Pid, logPath: logPath, done: make(chan struct{})}
	d.mgr = m
	go func() {
		err := cmd.Wait()
		if cerr := out.Close(); cerr != nil {
			d.out.say("closing the manager's log %s: %v", relPath(logPath), cerr)
		}
		m.err = err
		close(m.done)
	}()
	return d.waitManagerReady(ctx, "http://"+probeAddr+"/readyz")
}

func (d *demo) waitManagerReady(ctx context.Context, readyz string) error {
	d.out.say("waiting for the manager's %s", readyz)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	started := time.Now()
	err := d.poll(ctx, "the manager's /readyz", managerReadyTimeout, func() error {
		resp, err := hc.Get(readyz)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body) // drained for the connection's sake; the status is the answer
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.out.say("manager ready in %.1fs (pid %d)", time.Since(started).Seconds(), d.mgr.pid)
	return nil
}

// exitedError says that the manager exited, and how, while the demo was
// doing something else.
func (m *managerProcess) exitedError(while string) error {
	return fmt.Errorf("the manager exited (%s) %s; its errors are above, behind %q (the run's last line names its whole log)", exitString(m.err), while, managerPrefix)
}

// stop sends SIGTERM to the manager's process group, then SIGKILL after
// managerGrace, or at once once force is closed (a second signal).
func (m *managerProcess) stop(force <-chan struct{}) error {
	select {
	case <-m.done:
		m.out.say("the manager had already exited (%s)", exitString(m.err))
		return nil
	default:
	}
	grace := managerGrace
	select {
	case <-force:
		// A second signal came already: a short grace only.
		grace, force = 2*time.Second, nil
	default:
	}
	m.out.say("stopping the manager (SIGTERM to pid %d, SIGKILL after %s)", m.pid, grace)
	started := time.Now()
	_ = syscall.Kill(-m.pid, syscall.SIGTERM) // fails only if the group is gone already; done tells
	select {
	case <-m.done:
		m.out.say("manager stopped in %.1fs (%s)", time.Since(started).Seconds(), exitString(m.err))
		return nil
	case <-time.After(grace):
		m.out.say("manager still running %s after SIGTERM: SIGKILL", grace)
	case <-force:
		m.out.say("second signal: SIGKILL to the manager")
		grace = 0
	}
	_ = syscall.Kill(-m.pid, syscall.SIGKILL)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("manager pid %d still there 10s after SIGKILL", m.pid)
	}
	if grace == managerGrace {
		return fmt.Errorf("the manager ignored SIGTERM for %s and was killed", managerGrace)
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
