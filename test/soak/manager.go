package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/childproc"
)

const (
	// managerLog, in the run's directory, gets the output of every start
	// of the manager, each behind a line that names it.
	managerLog = "manager.log"
	// managerGrace is how long the last manager gets to stop after SIGTERM
	// at teardown before SIGKILL.
	managerGrace = 20 * time.Second
	// maxQuickExits is how many times in a row the manager may exit on its
	// own within quickExit of its start before the soak gives up: a
	// manager that cannot start would otherwise be restarted forever.
	maxQuickExits = 5
	quickExit     = 3 * time.Second
)

// supervisor runs the manager as a child process and keeps it running: it
// SIGKILLs it at random moments (until stopKilling) and starts it again at
// once whenever it exited, killed or not. One goroutine, loop, owns the
// children; the others talk to it through channels.
type supervisor struct {
	s    *soak
	args []string
	log  *os.File

	stopKill chan struct{} // stopKilling's handshake with loop
	quit     chan struct{} // closed by shutdown
	done     chan struct{} // closed when loop returned

	mu           sync.Mutex
	nKills       int
	nStarts      int
	nOwnExits    int   // exits the soak did not cause
	failure      error // why loop gave up, if it did
	pid          int   // the latest child's
	shutdownOnce sync.Once
}

func (s *soak) startManager(context.Context) error {
	log, err := os.OpenFile(filepath.Join(s.tmp, managerLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	m := &supervisor{
		s:   s,
		log: log,
		args: []string{
			"--providers-config", s.cp.providers,
			"--metrics-bind-address", "0",
			"--health-probe-bind-address", "127.0.0.1:0", // loopback, any free port
			"--leader-elect=false",
			"--installation-id", installationID,
			// No collector pass may delete anything during the run: the
			// first pass at start finds nothing past the grace, no second
			// pass comes, and dry run deletes nothing anyway.
			"--gc-interval", "24h",
			"--gc-grace", "24h",
			"--gc-dry-run",
		},
		stopKill: make(chan struct{}),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	first, err := m.spawn()
	if err != nil {
		return err
	}
	s.mgr = m
	s.out.say("manager started: %s %v (output in %s)", s.opts.manager, m.args, log.Name())
	go m.loop(first)
	return nil
}

func (m *supervisor) spawn() (*childproc.Child, error) {
	c, err := childproc.Start(m.s.opts.manager, m.args, append(os.Environ(), "KUBECONFIG="+m.s.cp.kubeconfig), m.log)
	if err != nil {
		return nil, err // names the binary
	}
	m.mu.Lock()
	m.nStarts++
	m.pid = c.PID
	n := m.nStarts
	m.mu.Unlock()
	_, _ = fmt.Fprintf(m.log, "=== soak: manager start #%d, pid %d, %s\n", n, c.PID, c.Started.Format(time.RFC3339Nano))
	return c, nil
}

// loop is the only goroutine that starts, kills and reaps children.
func (m *supervisor) loop(c *childproc.Child) {
	defer close(m.done)
	rng := m.s.rng(0)
	killing := true
	quickExits := 0
	for {
		var timer *time.Timer
		var kill <-chan time.Time
		if killing {
			span := m.s.opts.killMax - m.s.opts.killMin
			timer = time.NewTimer(m.s.opts.killMin + time.Duration(rng.Int64N(int64(span)+1)))
			kill = timer.C
		}
		restart := false
		for !restart {
			select {
			case <-kill:
				c.Kill(syscall.SIGKILL) // the group: the manager and anything it started
				<-c.Done()
				m.mu.Lock()
				m.nKills++
				m.mu.Unlock()
				_, _ = fmt.Fprintf(m.log, "=== soak: SIGKILL to pid %d after %s\n", c.PID, time.Since(c.Started).Round(time.Millisecond))
				quickExits = 0
				restart = true
			case <-c.Done():
				m.mu.Lock()
				m.nOwnExits++
				m.mu.Unlock()
				m.s.out.say("the manager (pid %d) exited on its own after %s: %v; restarting it", c.PID, time.Since(c.Started).Round(time.Millisecond), c.Err())
				if time.Since(c.Started) < quickExit {
					quickExits++
				} else {
					quickExits = 0
				}
				if quickExits >= maxQuickExits {
					m.setFailure(fmt.Errorf("the manager exited on its own %d times in a row within %s of its start (last: %v); its output is in %s", quickExits, quickExit, c.Err(), m.log.Name()))
					return
				}
				restart = true
			case <-m.stopKill:
				killing, kill = false, nil
				if timer != nil {
					timer.Stop()
				}
			case <-m.quit:
				if timer != nil {
					timer.Stop()
				}
				m.terminate(c)
				return
			}
		}
		if timer != nil {
			timer.Stop()
		}
		next, err := m.spawn()
		if err != nil {
			m.setFailure(err)
			return
		}
		c = next
	}
}

// terminate stops the last child the way a Deployment would: SIGTERM, then
// SIGKILL after managerGrace.
func (m *supervisor) terminate(c *childproc.Child) {
	if !c.Stop(managerGrace) {
		m.setFailure(fmt.Errorf("the manager (pid %d) ignored SIGTERM for %s and was killed", c.PID, managerGrace))
	}
}

// stopKilling ends the SIGKILLs; once it returned, no more come. The
// manager that runs then (or the one started next) keeps running.
func (m *supervisor) stopKilling() {
	select {
	case m.stopKill <- struct{}{}:
	case <-m.done:
	}
}

// shutdown stops the manager and returns why the supervisor failed, if it
// did. A second call does nothing more.
func (m *supervisor) shutdown() error {
	m.shutdownOnce.Do(func() {
		close(m.quit)
		<-m.done
		_ = m.log.Close()
	})
	return m.err()
}

func (m *supervisor) setFailure(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failure = errors.Join(m.failure, err)
}

// err says why the supervisor gave up, or nil while it is fine.
func (m *supervisor) err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failure
}

func (m *supervisor) kills() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nKills
}

func (m *supervisor) counts() (kills, starts, ownExits int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nKills, m.nStarts, m.nOwnExits
}

func (m *supervisor) lastPID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pid
}
