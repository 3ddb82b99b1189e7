// Package fake is a scriptable provider for tests, in the style of
// Karpenter's fake cloud provider: an in-memory Backend (the world) shared
// by any number of Providers (one per operator installation), explicit
// knobs to script failures, slowness and asynchrony, a record of every
// call, and Reset. It keeps the provider contract (providertest.Run passes
// against it), so a reconciler test that passes against it has exercised
// the contract, not a shortcut.
package fake

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// ipPool is where instance addresses come from. The fake serves nothing on
// them; a full pool is the fake's quota (ErrQuotaExceeded).
var ipPool = net.IPv4(127, 0, 200, 0).To4()

const ipPoolSize = 254 // .1 to .254

// Record is one instance as the backend holds it, whoever made it.
type Record struct {
	Name string
	// Marks is nil for an instance with no marks at all.
	Marks *provider.Marks
	State provider.State
	// IP is the instance's address; providers report it only when Running.
	IP string
	// StaticAddress is the static address of the Create that made the
	// instance (CreateRequest.StaticAddress), nil for none: its IP is that
	// address instead of one from the fake's pool.
	StaticAddress *provider.StaticAddress
	CreatedAt     time.Time
	// Deleting is set while a Delete that returned early is still running.
	Deleting bool
	// Serving is what the instance's serving signal says while it runs
	// (SetServing); the zero value is no signal.
	Serving Serving
}

// Serving is a fake instance's serving signal (provider.Instance's fields
// of the same names).
type Serving struct {
	Serving      provider.Serving
	Detail       string
	LastAnswered time.Time
	SetupError   string
	// Egress is what Get reports as the instance's egress address.
	Egress provider.Egress
	// HoldsGroupAddress is what Get reports of the group's address.
	HoldsGroupAddress *bool
}

// instance is a Record plus the countdowns that script asynchrony.
type instance struct {
	Record
	// starting: a Create made or restarted it and it runs after
	// pendingGets more Gets report Provisioning.
	starting    bool
	pendingGets int
	// deletingGets is how many more Gets see a Deleting instance.
	deletingGets int
	// createPending: a held create step (HoldCreate) has not finished it.
	createPending bool
}

// Backend is the in-memory world the fake providers share: instances by
// name, and a clock for CreatedAt. Its methods act behind the providers'
// backs, as a human or a crashed host would. All methods are safe for
// concurrent use.
type Backend struct {
	mu        sync.Mutex
	now       func() time.Time
	instances map[string]*instance
	// secondaries and their serial: secondary.go.
	secondaries     map[secondaryKey]*SecondaryRecord
	secondarySerial uint64
	// addresses are the egress addresses' holders by name, and moves
	// what MoveEgressAddress did: egressaddress.go.
	addresses map[string]string
	moves     []Move
	// fronts are the group fronts by group UID, and frontsRemoved the
	// groups whose front RemoveGroupFront removed: groupfront.go.
	fronts        map[string]provider.GroupFront
	frontsRemoved []provider.GroupRef
	// groupPeers are the member instances' peers UpdateGroupPeers gave
	// them, and peersUpdates its changes: grouppeers.go.
	groupPeers   map[string][]netip.Addr
	peersUpdates []PeersUpdate
	// createdServing is the serving signal of the instances Create makes
	// (SetCreatedServing).
	createdServing Serving
}

// NewBackend returns an empty backend whose clock is time.Now.
func NewBackend() *Backend {
	return &Backend{now: time.Now, instances: map[string]*instance{}}
}

// SetClock replaces the clock that stamps CreatedAt, for tests of the
// garbage collector's age rules. nil restores time.Now.
func (b *Backend) SetClock(now func() time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now == nil {
		now = time.Now
	}
	b.now = now
}

// Plant makes an instance named name with the given marks (nil: none),
// Running with an address, replacing any instance of that name. It is how a
// test stages an instance somebody else made, or one of ours that a crashed
// operator left behind.
func (b *Backend) Plant(name string, marks *provider.Marks) Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.instances, name) // frees its address for reuse
	in := &instance{Record: Record{Name: name, Marks: copyMarks(marks), State: provider.StateRunning, CreatedAt: b.now()}}
	in.IP, _ = b.freeIPLocked()
	if in.IP == "" {
		in.State = provider.StateProvisioning // no address left: it cannot serve
	}
	b.instances[name] = in
	return in.snapshot()
}

// SetState forces the state of the instance named name, as the world does
// (a VM shut down by hand, a Pod that failed). It ends any scripted start
// (Provisioning set here stays until changed), and Running gets an address
// when it had none. It reports whether the instance exists.
func (b *Backend) SetState(name string, state provider.State) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	if !ok {
		return false
	}
	in.State, in.starting, in.pendingGets, in.createPending = state, false, 0, false
	if state == provider.StateRunning && in.IP == "" {
		in.IP, _ = b.addressLocked(in.StaticAddress)
	}
	return true
}

// SetCreatedServing sets what the serving signal of the instances Create
// makes from now on says (a guest whose reporter has not reported yet says
// NotAnswering); the zero value is no signal.
func (b *Backend) SetCreatedServing(s Serving) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.createdServing = s
}

// SetServing sets what the serving signal of the instance named name says
// (a proxy that stops answering, a guest whose setup failed), and reports
// whether the instance exists.
func (b *Backend) SetServing(name string, s Serving) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	if ok {
		in.Serving = s
	}
	return ok
}

// Remove deletes the instance named name behind the providers' backs and
// reports whether it existed.
func (b *Backend) Remove(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.instances[name]
	delete(b.instances, name)
	return ok
}

// Lookup returns the instance named name, whoever owns it.
func (b *Backend) Lookup(name string) (Record, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in, ok := b.instances[name]
	if !ok {
		return Record{}, false
	}
	return in.snapshot(), true
}

// Records returns every instance, whoever owns it, sorted by name.
func (b *Backend) Records() []Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Record, 0, len(b.instances))
	for _, in := range b.instances {
		out = append(out, in.snapshot())
	}
	slices.SortFunc(out, func(x, y Record) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// freeIPLocked returns the lowest pool address no instance holds, so that
// addresses are reused like a real DHCP pool's and tests stay
// deterministic.
func (b *Backend) freeIPLocked() (string, bool) {
	used := make(map[string]bool, len(b.instances))
	for _, in := range b.instances {
		used[in.IP] = true
	}
	for i := 1; i <= ipPoolSize; i++ {
		ip := net.IPv4(ipPool[0], ipPool[1], ipPool[2], byte(i)).String()
		if !used[ip] {
			return ip, true
		}
	}
	return "", false
}

// addressLocked is the address an instance takes: its static address,
// else the lowest free one of the pool.
func (b *Backend) addressLocked(static *provider.StaticAddress) (string, bool) {
	if static != nil {
		return static.Address.Addr().String(), true
	}
	return b.freeIPLocked()
}

func copyStaticAddress(a *provider.StaticAddress) *provider.StaticAddress {
	if a == nil {
		return nil
	}
	c := *a
	c.DNS = slices.Clone(a.DNS)
	return &c
}

func (in *instance) snapshot() Record {
	r := in.Record
	r.Marks = copyMarks(in.Marks)
	r.StaticAddress = copyStaticAddress(in.StaticAddress)
	return r
}

// ours reports whether the instance carries the managed mark and this
// installation's identity: the only instances a provider may see.
func (in *instance) ours(installation string) bool {
	return in.Marks != nil && in.Marks.Managed && in.Marks.Installation == installation
}

// view is the instance as Create and Get report it: the address only when
// Running, as the contract says.
func (in *instance) view() provider.Instance {
	inst := provider.Instance{ID: ID(in.Name), State: in.State, CreatedAt: in.CreatedAt}
	if in.Marks != nil {
		inst.UID = in.Marks.UID
	}
	if in.State == provider.StateRunning {
		inst.IP = in.IP
		inst.Serving, inst.ServingDetail = in.Serving.Serving, in.Serving.Detail
		inst.LastAnswered, inst.SetupError = in.Serving.LastAnswered, in.Serving.SetupError
		inst.Egress, inst.HoldsGroupAddress = in.Serving.Egress, in.Serving.HoldsGroupAddress
	}
	if in.createPending {
		// Unfinished, and no step of this provider advancing it (Get asks
		// the in-flight table first): Create resumes it.
		inst.State, inst.IP, inst.Progress = provider.StateStopped, "", interruptedProgress
	}
	return inst
}

func copyMarks(m *provider.Marks) *provider.Marks {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// String keeps %v of a Record readable in test failures.
func (r Record) String() string {
	marks := "unmarked"
	if r.Marks != nil {
		marks = fmt.Sprintf("%+v", *r.Marks)
	}
	return fmt.Sprintf("%s{%s %s ip=%q created=%s deleting=%t}", r.Name, marks, r.State, r.IP, r.CreatedAt.Format(time.RFC3339), r.Deleting)
}
