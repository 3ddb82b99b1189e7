package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// progressThrottle bounds the status writes of a Proxy whose Ready message
// changes on every poll while its reason does not (a download counting MiB,
// a replacement's progress, an error text with a request ID): such a message
// is written at most once per interval, so a create that progresses for a
// minute costs a handful of writes, not one per poll. A change of reason or
// status is always written at once. Memory only: after a restart the next
// message is written straight away.
type progressThrottle struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
	now  func() time.Time // time.Now unless a test sets it
}

// message returns msg when Ready may show it now, else the message Ready
// already shows.
func (p *progressThrottle) message(px *egressv1.Proxy, status metav1.ConditionStatus, reason, msg string, every time.Duration) string {
	k := key(px)
	c := meta.FindStatusCondition(px.Status.Conditions, egressv1.ConditionReady)
	if c == nil || c.Reason != reason || c.Status != status || c.ObservedGeneration != px.Generation {
		// A transition: always written, and the interval starts anew.
		p.mark(k)
		return msg
	}
	if c.Message == msg {
		return msg
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	if last, ok := p.last[k]; ok && now.Sub(last) < every {
		return c.Message
	}
	p.setLocked(k, now)
	return msg
}

func (p *progressThrottle) mark(k types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(k, p.clock())
}

func (p *progressThrottle) setLocked(k types.NamespacedName, t time.Time) {
	if p.last == nil {
		p.last = map[types.NamespacedName]time.Time{}
	}
	p.last[k] = t
}

func (p *progressThrottle) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p *progressThrottle) forget(k types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, k)
}
