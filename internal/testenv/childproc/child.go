package childproc

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"syscall"
	"time"
)

// Child is one started process, in a process group of its own
// (SysProcAttr). One goroutine waits for it, so it is reaped as soon as it
// exits; Done tells everyone else.
type Child struct {
	Cmd     *exec.Cmd
	PID     int
	Started time.Time

	done chan struct{}
	err  error // how it exited; read only after done
}

// Start runs path with args and env (added to nothing: pass os.Environ()
// and more), both output streams to out.
func Start(path string, args, env []string, out io.Writer) (*Child, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = SysProcAttr()
	// Should the child leave a process of its own holding the output
	// open, Wait still returns.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	c := &Child{Cmd: cmd, PID: cmd.Process.Pid, Started: time.Now(), done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Done is closed once the child exited and was reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is how the child exited; nil until Done is closed, and after a clean
// exit.
func (c *Child) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Kill sends sig to the child's whole process group: the child and
// anything it started.
func (c *Child) Kill(sig syscall.Signal) { _ = syscall.Kill(-c.PID, sig) }

// Stop stops the child the way a Deployment would: SIGTERM to its group,
// then SIGKILL after grace. It says whether the child exited within grace.
func (c *Child) Stop(grace time.Duration) (inTime bool) {
	c.Kill(syscall.SIGTERM)
	select {
	case <-c.done:
		return true
	case <-time.After(grace):
	}
	c.Kill(syscall.SIGKILL)
	<-c.done
	return false
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a child's listener (a probe address) the parent must know in advance.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
