package providertest

import (
	"context"
	"sync"
)

// StepHolds is the HoldCreate of a Slow backend whose provider runs its
// create as an in-flight step (gcp, proxmox): a hold stops the instance's
// next slow request (the backend decides which, and calls Wait from its
// wire seam) until released, and its Done closes once the step that met
// the hold has ended (the provider reports the steps it starts to
// StepStarted). The zero value is ready.
type StepHolds struct {
	mu    sync.Mutex
	holds map[string]*stepHold
}

type stepHold struct {
	release chan struct{}
	once    sync.Once
	class   error
	taken   bool // a request met the hold; later ones pass
	done    chan struct{}
	wired   bool
}

// Hold is HoldCreate's answer for the instance named name.
func (s *StepHolds) Hold(name string) Hold {
	h := &stepHold{release: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if s.holds == nil {
		s.holds = map[string]*stepHold{}
	}
	s.holds[name] = h
	s.mu.Unlock()
	return Hold{
		Release: func(class error) { h.once.Do(func() { h.class = class; close(h.release) }) },
		Done:    h.done,
	}
}

// StepStarted wires name's hold, if any, to the step whose end closes done.
func (s *StepHolds) StepStarted(name string, done <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.holds[name]
	if h == nil || h.wired {
		return
	}
	h.wired = true
	go func() { <-done; close(h.done) }()
}

// Wait holds a request of the first instance whose untaken hold matches,
// until the hold is released or ctx ends. held says whether one matched;
// class is what the hold was released with (nil: the request goes on),
// err ctx's error when it ended first.
func (s *StepHolds) Wait(ctx context.Context, matches func(name string) bool) (held bool, class, err error) {
	s.mu.Lock()
	var h *stepHold
	for name, cand := range s.holds {
		if !cand.taken && matches(name) {
			h = cand
			break
		}
	}
	if h == nil {
		s.mu.Unlock()
		return false, nil, nil
	}
	h.taken = true
	s.mu.Unlock()
	select {
	case <-h.release:
		return true, h.class, nil
	case <-ctx.Done():
		return true, nil, ctx.Err()
	}
}
