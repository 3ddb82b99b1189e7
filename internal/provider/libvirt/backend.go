package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// backend is the seam: exactly the go-libvirt calls the provider makes,
// each with ctx first (go-libvirt's own methods take none and block), plus
// the connection's liveness and Close. Every error it returns is classified
// (errors.go): libvirt's code decides the class, a caller whose ctx ended
// gets Transient, a dead connection gives Transient.
//
// Flags the provider always passes the same way are fixed here rather than
// passed through, so a test double need not interpret them.
type backend interface {
	// The host.
	ConnectGetLibVersion(ctx context.Context) (uint64, error)
	ConnectGetHostname(ctx context.Context) (string, error)
	ConnectGetCapabilities(ctx context.Context) (string, error)
	NodeGetFreeMemory(ctx context.Context) (uint64, error)

	// Storage.
	StoragePoolLookupByName(ctx context.Context, name string) (libvirt.StoragePool, error)
	StoragePoolGetInfo(ctx context.Context, pool libvirt.StoragePool) (poolInfo, error)
	StoragePoolRefresh(ctx context.Context, pool libvirt.StoragePool) error
	StoragePoolListAllVolumes(ctx context.Context, pool libvirt.StoragePool) ([]libvirt.StorageVol, error)
	StorageVolLookupByName(ctx context.Context, pool libvirt.StoragePool, name string) (libvirt.StorageVol, error)
	StorageVolGetInfo(ctx context.Context, vol libvirt.StorageVol) (volInfo, error)
	StorageVolGetXMLDesc(ctx context.Context, vol libvirt.StorageVol) (string, error)
	StorageVolGetPath(ctx context.Context, vol libvirt.StorageVol) (string, error)
	StorageVolCreateXML(ctx context.Context, pool libvirt.StoragePool, xml string) (libvirt.StorageVol, error)
	// StorageVolUpload streams length bytes of r into vol from offset 0.
	// The reader is read no further once ctx ends.
	StorageVolUpload(ctx context.Context, vol libvirt.StorageVol, r io.Reader, length uint64) error
	StorageVolDelete(ctx context.Context, vol libvirt.StorageVol) error

	// Domains.
	// ConnectListAllDomains lists active and inactive domains.
	ConnectListAllDomains(ctx context.Context) ([]libvirt.Domain, error)
	DomainLookupByName(ctx context.Context, name string) (libvirt.Domain, error)
	DomainDefineXML(ctx context.Context, xml string) (libvirt.Domain, error)
	DomainGetXMLDesc(ctx context.Context, dom libvirt.Domain) (string, error)
	// DomainGetMetadata reads the metadata element in namespace uri from
	// the persistent definition; ErrNoDomainMetadata when there is none.
	DomainGetMetadata(ctx context.Context, dom libvirt.Domain, uri string) (string, error)
	// DomainSetMetadata writes the element (key is its namespace prefix)
	// with the given impact (live, config or both).
	DomainSetMetadata(ctx context.Context, dom libvirt.Domain, xml, key, uri string, impact libvirt.DomainModificationImpact) error
	DomainGetState(ctx context.Context, dom libvirt.Domain) (libvirt.DomainState, error)
	DomainCreate(ctx context.Context, dom libvirt.Domain) error
	DomainResume(ctx context.Context, dom libvirt.Domain) error
	DomainPMWakeup(ctx context.Context, dom libvirt.Domain) error
	DomainDestroy(ctx context.Context, dom libvirt.Domain) error
	// DomainUndefine removes the definition with its NVRAM, managed save
	// image, snapshot and checkpoint metadata, so nothing of it is left.
	DomainUndefine(ctx context.Context, dom libvirt.Domain) error
	DomainInterfaceAddresses(ctx context.Context, dom libvirt.Domain, src libvirt.DomainInterfaceAddressesSource) ([]libvirt.DomainInterface, error)
	// DomainAgentCommand sends one QEMU guest agent command (its JSON)
	// and returns the agent's JSON answer; the agent has timeoutSec to
	// answer. libvirt marks the domain tainted (custom-ga-command) once.
	DomainAgentCommand(ctx context.Context, dom libvirt.Domain, cmd string, timeoutSec int32) (string, error)

	// Disconnected is closed once the connection is dead; the host table
	// then dials a new one.
	Disconnected() <-chan struct{}
	// Close ends the connection. Calls still running fail Transient.
	Close() error
}

// poolInfo is StoragePoolGetInfo's answer, in bytes.
type poolInfo struct {
	State      libvirt.StoragePoolState
	Capacity   uint64
	Allocation uint64
	Available  uint64
}

// volInfo is StorageVolGetInfo's answer, in bytes.
type volInfo struct {
	Type       libvirt.StorageVolType
	Capacity   uint64
	Allocation uint64
}

// undefineFlags remove everything libvirt keeps beside a definition.
const undefineFlags = libvirt.DomainUndefineNvram | libvirt.DomainUndefineManagedSave |
	libvirt.DomainUndefineSnapshotsMetadata | libvirt.DomainUndefineCheckpointsMetadata

// budgets are the hard limits on how long one call may run before the
// connection it runs on is presumed wedged and closed. They are not how
// long a caller waits: a caller stops waiting when its own ctx ends,
// whatever the budget, and that harms nobody else on the connection.
type budgets struct {
	// dial bounds a whole dial: credentials, TCP, SSH, the channel and
	// libvirt's connect.
	dial time.Duration
	// call bounds one RPC.
	call time.Duration
	// upload bounds one streamed upload (an image into the pool, on its
	// own connection).
	upload time.Duration
	// rpc overrides call for the named RPCs.
	rpc map[string]time.Duration
}

// defaultBudgets: a dial is a few round trips plus libvirt's connect; an
// RPC is well under a second on a healthy host, but a define or start on a
// host whose QEMU capabilities are being re-probed has been seen at a
// minute (the recipe's /dev/kvm pitfall); an image upload is minutes.
var defaultBudgets = budgets{dial: 30 * time.Second, call: 2 * time.Minute, upload: time.Hour}

func (b budgets) forRPC(rpc string) time.Duration {
	if d, ok := b.rpc[rpc]; ok {
		return d
	}
	if rpc == "StorageVolUpload" {
		return b.upload
	}
	return b.call
}

// link is one connection's life: alive until killed, once, for a reason.
// Killing closes the transport under go-libvirt, which fails every call in
// flight on it (go-libvirt answers them ErrInterrupted).
type link struct {
	transport io.Closer
	dead      chan struct{}
	once      sync.Once
	mu        sync.Mutex
	why       error
}

func newLink(transport io.Closer) *link {
	return &link{transport: transport, dead: make(chan struct{})}
}

// kill marks the connection dead for why and closes its transport; only
// the first reason is kept.
func (k *link) kill(why error) {
	k.once.Do(func() {
		k.mu.Lock()
		k.why = why
		k.mu.Unlock()
		close(k.dead)
		_ = k.transport.Close()
	})
}

// err is why the connection is dead, or nil while it lives.
func (k *link) err() error {
	select {
	case <-k.dead:
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.why
	default:
		return nil
	}
}

// libvirtBackend adapts *libvirt.Libvirt to the seam: each call runs on its
// own goroutine under its budget, and its caller waits for the answer, its
// own ctx, or the connection's death, whichever comes first.
type libvirtBackend struct {
	host    string
	l       *libvirt.Libvirt
	budgets budgets
	link    *link
}

var _ backend = (*libvirtBackend)(nil)

// causer is a transport that knows why it ended (the SSH keepalive, the
// server closing).
type causer interface{ cause() error }

// connectLibvirt runs libvirt's connect (auth list, open qemu:///system)
// over conn within ctx and returns the adapter; address is where conn
// leads, for messages. conn belongs to the result (or is closed on
// failure).
func connectLibvirt(ctx context.Context, host, address string, conn net.Conn, b budgets) (*libvirtBackend, error) {
	l := libvirt.NewWithDialer(dialers.NewAlreadyConnected(conn))
	done := make(chan error, 1)
	go func() { done <- l.ConnectToURI(libvirt.QEMUSystem) }()
	select {
	case err := <-done:
		if err != nil {
			_ = conn.Close()
			return nil, newDialError(host, address, stageLibvirt, err)
		}
	case <-ctx.Done():
		// Closing the socket ends the connect's goroutine with an error
		// nobody reads (done is buffered).
		_ = conn.Close()
		return nil, newDialError(host, address, stageLibvirt, ctx.Err())
	}
	lb := &libvirtBackend{host: host, l: l, budgets: b, link: newLink(conn)}
	disconnected := l.Disconnected() // set by ConnectToURI; read once, here
	go func() {
		<-disconnected
		why := errors.New("the libvirt connection closed")
		if c, ok := conn.(causer); ok && c.cause() != nil {
			why = c.cause()
		}
		lb.link.kill(why)
	}()
	return lb, nil
}

// call runs fn, one blocking go-libvirt call, for its caller. A ctx that
// already ended sends nothing. The caller's ctx ending returns at once,
// Transient, and leaves the call and the connection alone: the call's
// answer is read and dropped when it comes. Only when the call outlives its
// budget is the connection killed, which fails every other call on it
// (Transient, naming the call that wedged it), and the host table dials a
// new one for the next caller.
func call[T any](ctx context.Context, b *libvirtBackend, rpc string, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, ctxError(rpc, b.host, err)
	}
	if why := b.link.err(); why != nil {
		return zero, b.deadError(rpc, why)
	}
	budget := b.budgets.forRPC(rpc)
	type result struct {
		v   T
		err error
	}
	res := make(chan result, 1)
	watchdog := time.AfterFunc(budget, func() {
		b.link.kill(fmt.Errorf("%s outlived its budget of %s, so the connection was presumed wedged and closed", rpc, budget))
	})
	go func() {
		v, err := fn()
		watchdog.Stop()
		res <- result{v, err}
	}()
	select {
	case r := <-res:
		if r.err == nil {
			return r.v, nil
		}
		if _, isLibvirt := libvirtCode(r.err); !isLibvirt {
			if why := b.link.err(); why != nil {
				return zero, b.deadError(rpc, why)
			}
		}
		return zero, classifyRPC(rpc, b.host, r.err)
	case <-ctx.Done():
		return zero, ctxError(rpc, b.host, ctx.Err())
	case <-b.link.dead:
		return zero, b.deadError(rpc, b.link.err())
	}
}

// call0 is call for an RPC with no result.
func call0(ctx context.Context, b *libvirtBackend, rpc string, fn func() error) error {
	_, err := call(ctx, b, rpc, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// deadError is the Transient error of a call on a dead connection.
func (b *libvirtBackend) deadError(rpc string, why error) error {
	return &provider.Error{Class: provider.ErrTransient, Err: &rpcError{RPC: rpc, Host: b.host,
		Err: fmt.Errorf("connection lost (the next call dials again): %w", why)}}
}

func (b *libvirtBackend) Disconnected() <-chan struct{} { return b.link.dead }

// Close kills the connection without a goodbye RPC, which could itself
// hang: libvirtd cleans up a closed socket as it does a closed connection.
func (b *libvirtBackend) Close() error {
	b.link.kill(errors.New("closed by the provider"))
	return nil
}

func (b *libvirtBackend) ConnectGetLibVersion(ctx context.Context) (uint64, error) {
	return call(ctx, b, "ConnectGetLibVersion", b.l.ConnectGetLibVersion)
}

func (b *libvirtBackend) ConnectGetHostname(ctx context.Context) (string, error) {
	return call(ctx, b, "ConnectGetHostname", b.l.ConnectGetHostname)
}

func (b *libvirtBackend) ConnectGetCapabilities(ctx context.Context) (string, error) {
	return call(ctx, b, "ConnectGetCapabilities", b.l.ConnectGetCapabilities)
}

func (b *libvirtBackend) NodeGetFreeMemory(ctx context.Context) (uint64, error) {
	return call(ctx, b, "NodeGetFreeMemory", b.l.NodeGetFreeMemory)
}

func (b *libvirtBackend) StoragePoolLookupByName(ctx context.Context, name string) (libvirt.StoragePool, error) {
	return call(ctx, b, "StoragePoolLookupByName", func() (libvirt.StoragePool, error) { return b.l.StoragePoolLookupByName(name) })
}

func (b *libvirtBackend) StoragePoolGetInfo(ctx context.Context, pool libvirt.StoragePool) (poolInfo, error) {
	return call(ctx, b, "StoragePoolGetInfo", func() (poolInfo, error) {
		state, capacity, allocation, available, err := b.l.StoragePoolGetInfo(pool)
		return poolInfo{State: libvirt.StoragePoolState(state), Capacity: capacity, Allocation: allocation, Available: available}, err
	})
}

func (b *libvirtBackend) StoragePoolRefresh(ctx context.Context, pool libvirt.StoragePool) error {
	return call0(ctx, b, "StoragePoolRefresh", func() error { return b.l.StoragePoolRefresh(pool, 0) })
}

func (b *libvirtBackend) StoragePoolListAllVolumes(ctx context.Context, pool libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	return call(ctx, b, "StoragePoolListAllVolumes", func() ([]libvirt.StorageVol, error) {
		vols, _, err := b.l.StoragePoolListAllVolumes(pool, 1, 0)
		return vols, err
	})
}

func (b *libvirtBackend) StorageVolLookupByName(ctx context.Context, pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	return call(ctx, b, "StorageVolLookupByName", func() (libvirt.StorageVol, error) { return b.l.StorageVolLookupByName(pool, name) })
}

func (b *libvirtBackend) StorageVolGetInfo(ctx context.Context, vol libvirt.StorageVol) (volInfo, error) {
	return call(ctx, b, "StorageVolGetInfo", func() (volInfo, error) {
		typ, capacity, allocation, err := b.l.StorageVolGetInfo(vol)
		return volInfo{Type: libvirt.StorageVolType(typ), Capacity: capacity, Allocation: allocation}, err
	})
}

func (b *libvirtBackend) StorageVolGetXMLDesc(ctx context.Context, vol libvirt.StorageVol) (string, error) {
	return call(ctx, b, "StorageVolGetXMLDesc", func() (string, error) { return b.l.StorageVolGetXMLDesc(vol, 0) })
}

func (b *libvirtBackend) StorageVolGetPath(ctx context.Context, vol libvirt.StorageVol) (string, error) {
	return call(ctx, b, "StorageVolGetPath", func() (string, error) { return b.l.StorageVolGetPath(vol) })
}

func (b *libvirtBackend) StorageVolCreateXML(ctx context.Context, pool libvirt.StoragePool, xml string) (libvirt.StorageVol, error) {
	return call(ctx, b, "StorageVolCreateXML", func() (libvirt.StorageVol, error) { return b.l.StorageVolCreateXML(pool, xml, 0) })
}

func (b *libvirtBackend) StorageVolUpload(ctx context.Context, vol libvirt.StorageVol, r io.Reader, length uint64) error {
	src := &ctxReader{ctx: ctx, r: r}
	return call0(ctx, b, "StorageVolUpload", func() error { return b.l.StorageVolUpload(vol, src, 0, length, 0) })
}

func (b *libvirtBackend) StorageVolDelete(ctx context.Context, vol libvirt.StorageVol) error {
	return call0(ctx, b, "StorageVolDelete", func() error { return b.l.StorageVolDelete(vol, 0) })
}

func (b *libvirtBackend) ConnectListAllDomains(ctx context.Context) ([]libvirt.Domain, error) {
	return call(ctx, b, "ConnectListAllDomains", func() ([]libvirt.Domain, error) {
		doms, _, err := b.l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive|libvirt.ConnectListDomainsInactive)
		return doms, err
	})
}

func (b *libvirtBackend) DomainLookupByName(ctx context.Context, name string) (libvirt.Domain, error) {
	return call(ctx, b, "DomainLookupByName", func() (libvirt.Domain, error) { return b.l.DomainLookupByName(name) })
}

func (b *libvirtBackend) DomainDefineXML(ctx context.Context, xml string) (libvirt.Domain, error) {
	return call(ctx, b, "DomainDefineXML", func() (libvirt.Domain, error) { return b.l.DomainDefineXML(xml) })
}

func (b *libvirtBackend) DomainGetXMLDesc(ctx context.Context, dom libvirt.Domain) (string, error) {
	return call(ctx, b, "DomainGetXMLDesc", func() (string, error) { return b.l.DomainGetXMLDesc(dom, 0) })
}

func (b *libvirtBackend) DomainGetMetadata(ctx context.Context, dom libvirt.Domain, uri string) (string, error) {
	return call(ctx, b, "DomainGetMetadata", func() (string, error) {
		return b.l.DomainGetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{uri}, libvirt.DomainAffectConfig)
	})
}

func (b *libvirtBackend) DomainSetMetadata(ctx context.Context, dom libvirt.Domain, xml, key, uri string, impact libvirt.DomainModificationImpact) error {
	return call0(ctx, b, "DomainSetMetadata", func() error {
		return b.l.DomainSetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{xml}, libvirt.OptString{key}, libvirt.OptString{uri}, impact)
	})
}

func (b *libvirtBackend) DomainGetState(ctx context.Context, dom libvirt.Domain) (libvirt.DomainState, error) {
	return call(ctx, b, "DomainGetState", func() (libvirt.DomainState, error) {
		state, _, err := b.l.DomainGetState(dom, 0)
		return libvirt.DomainState(state), err
	})
}

func (b *libvirtBackend) DomainCreate(ctx context.Context, dom libvirt.Domain) error {
	return call0(ctx, b, "DomainCreate", func() error { return b.l.DomainCreate(dom) })
}

func (b *libvirtBackend) DomainResume(ctx context.Context, dom libvirt.Domain) error {
	return call0(ctx, b, "DomainResume", func() error { return b.l.DomainResume(dom) })
}

func (b *libvirtBackend) DomainPMWakeup(ctx context.Context, dom libvirt.Domain) error {
	return call0(ctx, b, "DomainPMWakeup", func() error { return b.l.DomainPmWakeup(dom, 0) })
}

func (b *libvirtBackend) DomainDestroy(ctx context.Context, dom libvirt.Domain) error {
	return call0(ctx, b, "DomainDestroy", func() error { return b.l.DomainDestroy(dom) })
}

func (b *libvirtBackend) DomainUndefine(ctx context.Context, dom libvirt.Domain) error {
	return call0(ctx, b, "DomainUndefine", func() error { return b.l.DomainUndefineFlags(dom, undefineFlags) })
}

func (b *libvirtBackend) DomainInterfaceAddresses(ctx context.Context, dom libvirt.Domain, src libvirt.DomainInterfaceAddressesSource) ([]libvirt.DomainInterface, error) {
	return call(ctx, b, "DomainInterfaceAddresses", func() ([]libvirt.DomainInterface, error) {
		return b.l.DomainInterfaceAddresses(dom, uint32(src), 0)
	})
}

func (b *libvirtBackend) DomainAgentCommand(ctx context.Context, dom libvirt.Domain, cmd string, timeoutSec int32) (string, error) {
	return call(ctx, b, "DomainAgentCommand", func() (string, error) {
		res, err := b.l.QEMUDomainAgentCommand(dom, cmd, timeoutSec, 0)
		if err != nil || len(res) == 0 {
			return "", err
		}
		return res[0], nil
	})
}

// ctxReader stops an upload's source once the caller's ctx ended, so an
// abandoned upload ends (go-libvirt aborts the stream on a read error)
// instead of streaming on until its budget.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
