package libvirt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// fakeHost is the unit-test double behind the seam: one libvirt host in
// memory, shared by every connection dialled to it (pooled or dedicated),
// with explicit knobs:
//
//   - failNext(rpc, err): the next call of rpc fails with err (a
//     libvirt.Error for a libvirt answer), classified as the adapter would;
//   - hold(rpc): calls of rpc wait until the returned release is called
//     (or their ctx ends); arrived(rpc) says when one is waiting;
//   - dialErr: every dial fails with it (a classified dialError);
//   - holdDial: dials wait until released;
//   - the state itself (pools, volumes, domains, free memory,
//     capabilities) for partial-step resumes, already-gone deletes, the
//     capacity precheck and the overlay check.
//
// Its answers mirror libvirt's: the same error codes for a missing domain,
// volume, pool or metadata, ErrOperationInvalid for starting a running
// domain or destroying a stopped one, ErrStorageVolExist for a duplicate
// volume.
type fakeHost struct {
	name string

	mu         sync.Mutex
	libVersion uint64
	hostname   string
	caps       string
	freeMemory uint64
	pools      map[string]*fakePool
	domains    map[string]*fakeDomain
	calls      []string // every RPC, in order, as "<conn>:<rpc>"
	failures   map[string][]error
	holds      map[string]*fakeGate
	dials      int
	closes     int
	dialErr    error
	dialGate   *fakeGate
	conns      []*fakeConn
	// bootOnStart: a domain's guest boots (bootGuest) whenever the domain
	// is started, as the conformance suite's world needs; otherwise tests
	// boot guests or give addresses themselves.
	bootOnStart bool
}

type fakePool struct {
	pool      libvirt.StoragePool
	state     libvirt.StoragePoolState
	capacity  uint64
	available uint64
	vols      map[string]*fakeVol
}

type fakeVol struct {
	vol      libvirt.StorageVol
	xml      string
	capacity uint64
	data     []byte
}

type fakeDomain struct {
	dom      libvirt.Domain
	xml      string
	state    libvirt.DomainState
	metadata map[string]string
	ifaces   map[libvirt.DomainInterfaceAddressesSource][]libvirt.DomainInterface
	// guestFiles are the guest's files its agent reads; nil is a healthy
	// guest whose reporter says its proxy answers, once its agent is up
	// (it reports an address).
	guestFiles map[string]string
	handles    map[int64]string
	// agentLog is every agent command the guest answered, by name.
	agentLog []string
	// execs are the guest-exec runs not yet reported exited, by pid.
	execs   map[int64]*fakeExec
	nextPID int64
	// execFail, when set, is how the next guest-exec ends (it writes
	// nothing); execPending is how many guest-exec-status answers of each
	// run say it has not exited yet.
	execFail    *fakeExec
	execPending int
	// execHang: guest-exec runs never exit.
	execHang bool
}

// fakeExec is one guest-exec run as guest-exec-status reports it.
type fakeExec struct {
	exitCode int
	signal   int // non-zero: killed by it
	stdout   string
	stderr   string
	pending  int
	hang     bool
	capture  bool // guest-exec's capture-output: status carries the outputs
}

// fakeGate holds calls until released.
type fakeGate struct {
	release chan struct{}
	once    sync.Once
	arrived chan struct{} // one token per waiting call
}

func newFakeGate() *fakeGate {
	return &fakeGate{release: make(chan struct{}), arrived: make(chan struct{}, 1024)}
}

func (g *fakeGate) open() { g.once.Do(func() { close(g.release) }) }

// capsQEMUOnly is a capabilities document of a host without usable KVM:
// libvirt offers qemu guests only.
const capsQEMUOnly = `<capabilities><host><cpu><arch>x86_64</arch><model>Skylake-Client-IBRS</model><feature name='hypervisor'/></cpu></host>
<guest><os_type>hvm</os_type><arch name='x86_64'><wordsize>64</wordsize><emulator>/usr/bin/qemu-system-x86_64</emulator><domain type='qemu'/></arch></guest></capabilities>`

func newFakeHost(name string) *fakeHost {
	return &fakeHost{
		name:       name,
		libVersion: 9000000,
		hostname:   name + ".example",
		caps:       capsQEMUOnly,
		freeMemory: 8 << 30,
		pools: map[string]*fakePool{DefaultPool: {
			pool:  libvirt.StoragePool{Name: DefaultPool},
			state: libvirt.StoragePoolRunning, capacity: 100 << 30, available: 60 << 30,
			vols: map[string]*fakeVol{},
		}},
		domains:  map[string]*fakeDomain{},
		failures: map[string][]error{},
		holds:    map[string]*fakeGate{},
	}
}

// failNext makes the next call of rpc fail with err.
func (h *fakeHost) failNext(rpc string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures[rpc] = append(h.failures[rpc], err)
}

// hold makes calls of rpc wait; the result releases them.
func (h *fakeHost) hold(rpc string) *fakeGate {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := newFakeGate()
	h.holds[rpc] = g
	return g
}

// callLog returns the RPCs made so far.
func (h *fakeHost) callLog() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

func (h *fakeHost) counts() (dials, closes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dials, h.closes
}

// connect is a connector over this host (the Host argument must name it).
func (h *fakeHost) connect(ctx context.Context, hc Host) (backend, error) {
	h.mu.Lock()
	gate, dialErr := h.dialGate, h.dialErr
	h.mu.Unlock()
	if gate != nil {
		gate.arrived <- struct{}{}
		select {
		case <-gate.release:
		case <-ctx.Done():
			return nil, newDialError(hc.Name, hc.Address, stageTCP, ctx.Err())
		}
	}
	if dialErr != nil {
		return nil, dialErr
	}
	if err := ctx.Err(); err != nil {
		return nil, newDialError(hc.Name, hc.Address, stageTCP, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dials++
	c := &fakeConn{h: h, id: h.dials, dead: make(chan struct{})}
	h.conns = append(h.conns, c)
	return c, nil
}

// fakeHosts routes a connector to the fake of each host name.
type fakeHosts map[string]*fakeHost

func (fs fakeHosts) connect(ctx context.Context, h Host) (backend, error) {
	f, ok := fs[h.Name]
	if !ok {
		return nil, fmt.Errorf("no fake for host %s", h.Name)
	}
	return f.connect(ctx, h)
}

// fakeConn is one connection to a fakeHost.
type fakeConn struct {
	h    *fakeHost
	id   int
	dead chan struct{}
	once sync.Once
}

var _ backend = (*fakeConn)(nil)

func (c *fakeConn) Disconnected() <-chan struct{} { return c.dead }

func (c *fakeConn) Close() error {
	c.once.Do(func() {
		c.h.mu.Lock()
		c.h.closes++
		c.h.mu.Unlock()
		close(c.dead)
	})
	return nil
}

// kill ends the connection as a dead transport would.
func (c *fakeConn) kill() { _ = c.Close() }

func (c *fakeConn) DomainAgentCommand(ctx context.Context, dom libvirt.Domain, cmd string, timeoutSec int32) (v string, err error) {
	err = c.do(ctx, "DomainAgentCommand", func() error {
		d, err := c.domain(dom.Name)
		if err != nil {
			return err
		}
		if d.state != libvirt.DomainRunning {
			return lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: domain is not running")
		}
		if d.guestFiles == nil && len(d.ifaces[libvirt.DomainInterfaceAddressesSrcAgent]) == 0 {
			return lvErr(libvirt.ErrAgentUnresponsive, "Guest agent is not responding: QEMU guest agent is not connected")
		}
		v, err = d.agent(cmd)
		return err
	})
	return v, err
}

// agent answers the guest-file commands as qemu-ga does, through libvirt.
func (d *fakeDomain) agent(cmd string) (string, error) {
	var c struct {
		Execute   string `json:"execute"`
		Arguments struct {
			Path    string   `json:"path"`
			Handle  int64    `json:"handle"`
			Arg     []string `json:"arg"`
			Input   string   `json:"input-data"`
			Capture bool     `json:"capture-output"`
			PID     int64    `json:"pid"`
		} `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(cmd), &c); err != nil {
		return "", lvErr(libvirt.ErrInternalError, "internal error: cannot parse json %s: %v", cmd, err)
	}
	d.agentLog = append(d.agentLog, c.Execute)
	files := d.guestFiles
	if files == nil {
		files = defaultGuestFiles()
	}
	switch c.Execute {
	case "guest-exec":
		return d.exec(append([]string{c.Arguments.Path}, c.Arguments.Arg...), c.Arguments.Input, c.Arguments.Capture)
	case "guest-exec-status":
		return d.execStatus(c.Arguments.PID)
	case "guest-file-open":
		content, ok := files[c.Arguments.Path]
		if !ok {
			return "", lvErr(libvirt.ErrInternalError, "internal error: unable to execute QEMU agent command 'guest-file-open': failed to open file '%s' (mode: 'r'): No such file or directory", c.Arguments.Path)
		}
		if d.handles == nil {
			d.handles = map[int64]string{}
		}
		h := int64(1000 + len(d.handles))
		d.handles[h] = content
		return fmt.Sprintf(`{"return":%d}`, h), nil
	case "guest-file-read":
		content, ok := d.handles[c.Arguments.Handle]
		if !ok {
			return "", lvErr(libvirt.ErrInternalError, "internal error: unable to execute QEMU agent command 'guest-file-read': handle '%d' has not been found", c.Arguments.Handle)
		}
		return fmt.Sprintf(`{"return":{"count":%d,"buf-b64":"%s","eof":true}}`, len(content), base64.StdEncoding.EncodeToString([]byte(content))), nil
	case "guest-file-close":
		delete(d.handles, c.Arguments.Handle)
		return `{"return":{}}`, nil
	}
	return "", lvErr(libvirt.ErrInternalError, "internal error: unable to execute QEMU agent command '%s': The command %s has not been found", c.Execute, c.Execute)
}

// defaultGuestFiles are a healthy guest's files: its reporter says its
// proxy answers.
func defaultGuestFiles() map[string]string {
	return map[string]string{servingreport.ReportPath: servingreport.Format(servingreport.Report{Serving: true, CloudInit: "done"})}
}

// exec starts argv as qemu-ga's guest-exec does, at once: vrrp.ApplyPeers
// writes its standard input to vrrp.PeersPath (so the next read returns
// it) and exits 0, unless execFail says how it ends; any other command
// is not there (127).
func (d *fakeDomain) exec(argv []string, inputB64 string, capture bool) (string, error) {
	in, err := base64.StdEncoding.DecodeString(inputB64)
	if err != nil {
		return "", lvErr(libvirt.ErrInternalError, "internal error: unable to execute QEMU agent command 'guest-exec': Parameter 'input-data' expects base64: %v", err)
	}
	run := &fakeExec{pending: d.execPending, hang: d.execHang}
	switch {
	case d.execFail != nil:
		f := *d.execFail
		f.pending, f.hang = run.pending, run.hang
		run, d.execFail = &f, nil
	case slices.Equal(argv, vrrp.ApplyPeers()):
		if d.guestFiles == nil {
			d.guestFiles = defaultGuestFiles()
		}
		d.guestFiles[vrrp.PeersPath] = string(in)
	default:
		run.exitCode, run.stderr = 127, fmt.Sprintf("%s: not found\n", argv[0])
	}
	if d.execs == nil {
		d.execs = map[int64]*fakeExec{}
	}
	run.capture = capture
	d.nextPID++
	pid := 4000 + d.nextPID
	d.execs[pid] = run
	return fmt.Sprintf(`{"return":{"pid":%d}}`, pid), nil
}

// execStatus answers guest-exec-status as qemu-ga does: not exited while
// the run is pending, then its end once (qemu-ga forgets a run it has
// reported exited).
func (d *fakeDomain) execStatus(pid int64) (string, error) {
	run, ok := d.execs[pid]
	if !ok {
		return "", lvErr(libvirt.ErrInternalError, "internal error: unable to execute QEMU agent command 'guest-exec-status': Invalid parameter 'pid'")
	}
	if run.hang || run.pending > 0 {
		run.pending--
		return `{"return":{"exited":false}}`, nil
	}
	delete(d.execs, pid)
	st := map[string]any{"exited": true}
	if run.signal != 0 {
		st["signal"] = run.signal
	} else {
		st["exitcode"] = run.exitCode
	}
	if run.capture {
		st["out-data"] = base64.StdEncoding.EncodeToString([]byte(run.stdout))
		st["err-data"] = base64.StdEncoding.EncodeToString([]byte(run.stderr))
	}
	out, err := json.Marshal(map[string]any{"return": st})
	return string(out), err
}

func lvErr(code libvirt.ErrorNumber, format string, args ...any) error {
	return libvirt.Error{Code: uint32(code), Message: fmt.Sprintf(format, args...)}
}

// do runs one RPC the way the adapter would: ctx and liveness first, then
// the log, a hold, a queued failure, and op under the host's lock; every
// error classified by classifyRPC.
func (c *fakeConn) do(ctx context.Context, rpc string, op func() error) error {
	if err := ctx.Err(); err != nil {
		return ctxError(rpc, c.h.name, err)
	}
	select {
	case <-c.dead:
		return &provider.Error{Class: provider.ErrTransient, Err: &rpcError{RPC: rpc, Host: c.h.name, Err: errors.New("connection lost")}}
	default:
	}
	c.h.mu.Lock()
	c.h.calls = append(c.h.calls, strconv.Itoa(c.id)+":"+rpc)
	gate := c.h.holds[rpc]
	c.h.mu.Unlock()
	if gate != nil {
		gate.arrived <- struct{}{}
		select {
		case <-gate.release:
		case <-ctx.Done():
			// As a real host does, the call still runs once released:
			// only its caller stopped waiting.
			go func() {
				<-gate.release
				c.h.mu.Lock()
				defer c.h.mu.Unlock()
				_ = op()
			}()
			return ctxError(rpc, c.h.name, ctx.Err())
		case <-c.dead:
			return &provider.Error{Class: provider.ErrTransient, Err: &rpcError{RPC: rpc, Host: c.h.name, Err: errors.New("connection lost")}}
		}
	}
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if q := c.h.failures[rpc]; len(q) > 0 {
		c.h.failures[rpc] = q[1:]
		return classifyRPC(rpc, c.h.name, q[0])
	}
	return classifyRPC(rpc, c.h.name, op())
}

func (c *fakeConn) ConnectGetLibVersion(ctx context.Context) (v uint64, err error) {
	err = c.do(ctx, "ConnectGetLibVersion", func() error { v = c.h.libVersion; return nil })
	return v, err
}

func (c *fakeConn) ConnectGetHostname(ctx context.Context) (v string, err error) {
	err = c.do(ctx, "ConnectGetHostname", func() error { v = c.h.hostname; return nil })
	return v, err
}

func (c *fakeConn) ConnectGetCapabilities(ctx context.Context) (v string, err error) {
	err = c.do(ctx, "ConnectGetCapabilities", func() error { v = c.h.caps; return nil })
	return v, err
}

func (c *fakeConn) NodeGetFreeMemory(ctx context.Context) (v uint64, err error) {
	err = c.do(ctx, "NodeGetFreeMemory", func() error { v = c.h.freeMemory; return nil })
	return v, err
}

func (c *fakeConn) pool(name string) (*fakePool, error) {
	p, ok := c.h.pools[name]
	if !ok {
		return nil, lvErr(libvirt.ErrNoStoragePool, "Storage pool not found: no storage pool with matching name '%s'", name)
	}
	return p, nil
}

func (c *fakeConn) StoragePoolLookupByName(ctx context.Context, name string) (v libvirt.StoragePool, err error) {
	err = c.do(ctx, "StoragePoolLookupByName", func() error {
		p, err := c.pool(name)
		if err == nil {
			v = p.pool
		}
		return err
	})
	return v, err
}

func (c *fakeConn) StoragePoolGetInfo(ctx context.Context, pool libvirt.StoragePool) (v poolInfo, err error) {
	err = c.do(ctx, "StoragePoolGetInfo", func() error {
		p, err := c.pool(pool.Name)
		if err == nil {
			v = poolInfo{State: p.state, Capacity: p.capacity, Allocation: p.capacity - p.available, Available: p.available}
		}
		return err
	})
	return v, err
}

func (c *fakeConn) StoragePoolRefresh(ctx context.Context, pool libvirt.StoragePool) error {
	return c.do(ctx, "StoragePoolRefresh", func() error { _, err := c.pool(pool.Name); return err })
}

func (c *fakeConn) StoragePoolListAllVolumes(ctx context.Context, pool libvirt.StoragePool) (v []libvirt.StorageVol, err error) {
	err = c.do(ctx, "StoragePoolListAllVolumes", func() error {
		p, err := c.pool(pool.Name)
		if err != nil {
			return err
		}
		for _, name := range config.SortedKeys(p.vols) {
			v = append(v, p.vols[name].vol)
		}
		return nil
	})
	return v, err
}

func (c *fakeConn) vol(pool, name string) (*fakeVol, error) {
	p, err := c.pool(pool)
	if err != nil {
		return nil, err
	}
	v, ok := p.vols[name]
	if !ok {
		return nil, lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name '%s'", name)
	}
	return v, nil
}

func (c *fakeConn) StorageVolLookupByName(ctx context.Context, pool libvirt.StoragePool, name string) (v libvirt.StorageVol, err error) {
	err = c.do(ctx, "StorageVolLookupByName", func() error {
		fv, err := c.vol(pool.Name, name)
		if err == nil {
			v = fv.vol
		}
		return err
	})
	return v, err
}

func (c *fakeConn) StorageVolGetInfo(ctx context.Context, vol libvirt.StorageVol) (v volInfo, err error) {
	err = c.do(ctx, "StorageVolGetInfo", func() error {
		fv, err := c.vol(vol.Pool, vol.Name)
		if err == nil {
			v = volInfo{Type: libvirt.StorageVolFile, Capacity: fv.capacity, Allocation: uint64(len(fv.data))}
		}
		return err
	})
	return v, err
}

func (c *fakeConn) StorageVolGetXMLDesc(ctx context.Context, vol libvirt.StorageVol) (v string, err error) {
	err = c.do(ctx, "StorageVolGetXMLDesc", func() error {
		fv, err := c.vol(vol.Pool, vol.Name)
		if err == nil {
			v = fv.xml
		}
		return err
	})
	return v, err
}

func (c *fakeConn) StorageVolGetPath(ctx context.Context, vol libvirt.StorageVol) (v string, err error) {
	err = c.do(ctx, "StorageVolGetPath", func() error {
		fv, err := c.vol(vol.Pool, vol.Name)
		if err == nil {
			v = fv.vol.Key
		}
		return err
	})
	return v, err
}

var (
	xmlName     = regexp.MustCompile(`<name>([^<]+)</name>`)
	xmlCapacity = regexp.MustCompile(`<capacity(?: unit='bytes')?>(\d+)</capacity>`)
)

func (c *fakeConn) StorageVolCreateXML(ctx context.Context, pool libvirt.StoragePool, x string) (v libvirt.StorageVol, err error) {
	err = c.do(ctx, "StorageVolCreateXML", func() error {
		p, err := c.pool(pool.Name)
		if err != nil {
			return err
		}
		m := xmlName.FindStringSubmatch(x)
		if m == nil {
			return lvErr(libvirt.ErrXMLError, "XML error: missing volume name")
		}
		if _, dup := p.vols[m[1]]; dup {
			return lvErr(libvirt.ErrStorageVolExist, "storage volume '%s' exists already", m[1])
		}
		var capacity uint64
		if cm := xmlCapacity.FindStringSubmatch(x); cm != nil {
			capacity, _ = strconv.ParseUint(cm[1], 10, 64)
		}
		if capacity > p.available {
			return lvErr(libvirt.ErrSystemError, "cannot allocate %d bytes in file '%s': No space left on device", capacity, m[1])
		}
		v = libvirt.StorageVol{Pool: pool.Name, Name: m[1], Key: "/var/lib/libvirt/images/" + m[1]}
		p.vols[m[1]] = &fakeVol{vol: v, xml: x, capacity: capacity}
		return nil
	})
	return v, err
}

func (c *fakeConn) StorageVolUpload(ctx context.Context, vol libvirt.StorageVol, r io.Reader, length uint64) error {
	// Read outside the host's lock (a streamed source may block), then
	// store under it. Length 0 uploads to the end of the stream, as in
	// libvirt.
	limit := int64(length) + 1
	if length == 0 {
		limit = math.MaxInt64
	}
	data, readErr := io.ReadAll(io.LimitReader(&ctxReader{ctx: ctx, r: r}, limit))
	return c.do(ctx, "StorageVolUpload", func() error {
		fv, err := c.vol(vol.Pool, vol.Name)
		if err != nil {
			return err
		}
		if readErr != nil {
			return readErr
		}
		if length != 0 && uint64(len(data)) != length {
			return lvErr(libvirt.ErrInternalError, "stream had %d bytes, %d announced", len(data), length)
		}
		fv.data = data
		return nil
	})
}

func (c *fakeConn) StorageVolDelete(ctx context.Context, vol libvirt.StorageVol) error {
	return c.do(ctx, "StorageVolDelete", func() error {
		if _, err := c.vol(vol.Pool, vol.Name); err != nil {
			return err
		}
		delete(c.h.pools[vol.Pool].vols, vol.Name)
		return nil
	})
}

func (c *fakeConn) ConnectListAllDomains(ctx context.Context) (v []libvirt.Domain, err error) {
	err = c.do(ctx, "ConnectListAllDomains", func() error {
		for _, name := range config.SortedKeys(c.h.domains) {
			v = append(v, c.h.domains[name].dom)
		}
		return nil
	})
	return v, err
}

func (c *fakeConn) domain(name string) (*fakeDomain, error) {
	d, ok := c.h.domains[name]
	if !ok {
		return nil, lvErr(libvirt.ErrNoDomain, "Domain not found: no domain with matching name '%s'", name)
	}
	return d, nil
}

func (c *fakeConn) DomainLookupByName(ctx context.Context, name string) (v libvirt.Domain, err error) {
	err = c.do(ctx, "DomainLookupByName", func() error {
		d, err := c.domain(name)
		if err == nil {
			v = d.dom
		}
		return err
	})
	return v, err
}

func (c *fakeConn) DomainDefineXML(ctx context.Context, x string) (v libvirt.Domain, err error) {
	err = c.do(ctx, "DomainDefineXML", func() error {
		m := xmlName.FindStringSubmatch(x)
		if m == nil {
			return lvErr(libvirt.ErrXMLError, "XML error: missing domain name")
		}
		md, err := fakeMetadataOf(x)
		if err != nil {
			return lvErr(libvirt.ErrXMLError, "XML error: %v", err)
		}
		if d, ok := c.h.domains[m[1]]; ok { // libvirt redefines in place
			d.xml, d.metadata = x, md
			v = d.dom
			return nil
		}
		v = libvirt.Domain{Name: m[1], ID: -1}
		copy(v.UUID[:], m[1])
		c.h.domains[m[1]] = &fakeDomain{dom: v, xml: x, state: libvirt.DomainShutoff, metadata: md,
			ifaces: map[libvirt.DomainInterfaceAddressesSource][]libvirt.DomainInterface{}}
		return nil
	})
	return v, err
}

func (c *fakeConn) DomainGetXMLDesc(ctx context.Context, dom libvirt.Domain) (v string, err error) {
	err = c.do(ctx, "DomainGetXMLDesc", func() error {
		d, err := c.domain(dom.Name)
		if err == nil {
			v = d.xml
		}
		return err
	})
	return v, err
}

func (c *fakeConn) DomainGetMetadata(ctx context.Context, dom libvirt.Domain, uri string) (v string, err error) {
	err = c.do(ctx, "DomainGetMetadata", func() error {
		d, err := c.domain(dom.Name)
		if err != nil {
			return err
		}
		m, ok := d.metadata[uri]
		if !ok {
			return lvErr(libvirt.ErrNoDomainMetadata, "metadata not found: Requested metadata element is not present")
		}
		v = m
		return nil
	})
	return v, err
}

func (c *fakeConn) DomainSetMetadata(ctx context.Context, dom libvirt.Domain, x, _, uri string, _ libvirt.DomainModificationImpact) error {
	return c.do(ctx, "DomainSetMetadata", func() error {
		d, err := c.domain(dom.Name)
		if err == nil {
			d.metadata[uri] = x
		}
		return err
	})
}

func (c *fakeConn) DomainGetState(ctx context.Context, dom libvirt.Domain) (v libvirt.DomainState, err error) {
	err = c.do(ctx, "DomainGetState", func() error {
		d, err := c.domain(dom.Name)
		if err == nil {
			v = d.state
		}
		return err
	})
	return v, err
}

// transition moves a domain from one of the states in from to to, or
// answers ErrOperationInvalid as libvirt does.
func (c *fakeConn) transition(name string, to libvirt.DomainState, what string, from ...libvirt.DomainState) error {
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	if !slices.Contains(from, d.state) {
		return lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: cannot %s domain %s in state %s", what, name, d.state)
	}
	d.state = to
	return nil
}

func (c *fakeConn) DomainCreate(ctx context.Context, dom libvirt.Domain) error {
	return c.do(ctx, "DomainCreate", func() error {
		err := c.transition(dom.Name, libvirt.DomainRunning, "start", libvirt.DomainShutoff, libvirt.DomainShutdown, libvirt.DomainCrashed, libvirt.DomainNostate)
		if err == nil && c.h.bootOnStart {
			// A domain without a NIC or seed (a planted one) boots to
			// nothing: no address.
			_ = c.h.bootLocked(dom.Name)
		}
		return err
	})
}

func (c *fakeConn) DomainResume(ctx context.Context, dom libvirt.Domain) error {
	return c.do(ctx, "DomainResume", func() error {
		return c.transition(dom.Name, libvirt.DomainRunning, "resume", libvirt.DomainPaused)
	})
}

func (c *fakeConn) DomainPMWakeup(ctx context.Context, dom libvirt.Domain) error {
	return c.do(ctx, "DomainPMWakeup", func() error {
		return c.transition(dom.Name, libvirt.DomainRunning, "wake up", libvirt.DomainPmsuspended)
	})
}

func (c *fakeConn) DomainDestroy(ctx context.Context, dom libvirt.Domain) error {
	return c.do(ctx, "DomainDestroy", func() error {
		return c.transition(dom.Name, libvirt.DomainShutoff, "destroy", libvirt.DomainRunning, libvirt.DomainBlocked,
			libvirt.DomainPaused, libvirt.DomainPmsuspended, libvirt.DomainShutdown, libvirt.DomainCrashed)
	})
}

func (c *fakeConn) DomainUndefine(ctx context.Context, dom libvirt.Domain) error {
	return c.do(ctx, "DomainUndefine", func() error {
		if _, err := c.domain(dom.Name); err != nil {
			return err
		}
		delete(c.h.domains, dom.Name)
		return nil
	})
}

func (c *fakeConn) DomainInterfaceAddresses(ctx context.Context, dom libvirt.Domain, src libvirt.DomainInterfaceAddressesSource) (v []libvirt.DomainInterface, err error) {
	err = c.do(ctx, "DomainInterfaceAddresses", func() error {
		d, err := c.domain(dom.Name)
		if err != nil {
			return err
		}
		if d.state != libvirt.DomainRunning {
			return lvErr(libvirt.ErrOperationInvalid, "Requested operation is not valid: domain is not running")
		}
		v = slices.Clone(d.ifaces[src])
		return nil
	})
	return v, err
}

// fakeMetadataOf reads the children of a domain XML's <metadata> by
// namespace, as libvirt keeps them for DomainGetMetadata: each child
// re-serialised with its namespace declared.
func fakeMetadataOf(domainXML string) (map[string]string, error) {
	var d struct {
		Metadata struct {
			Items []struct {
				XMLName xml.Name
				Inner   string `xml:",innerxml"`
			} `xml:",any"`
		} `xml:"metadata"`
	}
	if err := xml.Unmarshal([]byte(domainXML), &d); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, it := range d.Metadata.Items {
		if it.XMLName.Space == "" {
			return nil, fmt.Errorf("metadata element <%s> has no namespace", it.XMLName.Local)
		}
		out[it.XMLName.Space] = fmt.Sprintf("<%s xmlns=%q>%s</%s>", it.XMLName.Local, it.XMLName.Space, it.Inner, it.XMLName.Local)
	}
	return out, nil
}

// dhcpAddress is what the fake network's DHCP gives a guest whose seed
// has no network-config.
const dhcpAddress = "192.0.2.50"

// bootGuest plays the first boot of domain name's guest: cloud-init reads
// the seed on the domain's CD-ROM (the volume its XML names) and, when the
// seed has a network-config, takes its static address on the NIC it
// matches (by MAC, or a name glob against eth0), else asks DHCP
// (dhcpAddress); the guest agent then reports the NIC and its address.
func (h *fakeHost) bootGuest(name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bootLocked(name)
}

func (h *fakeHost) bootLocked(name string) error {
	d, ok := h.domains[name]
	if !ok {
		return fmt.Errorf("no domain %s", name)
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(d.xml); err != nil {
		return err
	}
	if x.Devices == nil || len(x.Devices.Interfaces) != 1 || x.Devices.Interfaces[0].MAC == nil {
		return fmt.Errorf("domain %s has no NIC with a MAC", name)
	}
	mac := x.Devices.Interfaces[0].MAC.Address
	addr, prefix := dhcpAddress, 24
	for _, disk := range x.Devices.Disks {
		if disk.Device != "cdrom" || disk.Source == nil || disk.Source.Volume == nil {
			continue
		}
		pool, ok := h.pools[disk.Source.Volume.Pool]
		if !ok || pool.vols[disk.Source.Volume.Volume] == nil {
			return fmt.Errorf("domain %s: no seed volume %s/%s", name, disk.Source.Volume.Pool, disk.Source.Volume.Volume)
		}
		netcfg, found, err := nocloud.ReadFile(pool.vols[disk.Source.Volume.Volume].data, nocloud.FileNetworkConfig)
		if err != nil || !found {
			continue // no seed cloud-init reads, or DHCP
		}
		static, match, err := nocloud.ParseNetworkConfig([]byte(netcfg.Reveal()))
		if err != nil {
			return fmt.Errorf("domain %s: the seed's network-config: %w", name, err)
		}
		if !match.Matches("eth0", mac) {
			return fmt.Errorf("domain %s: the seed's network-config matches %+v, not the NIC eth0 %s", name, match, mac)
		}
		addr, prefix = static.Address.Addr().String(), static.Address.Bits()
	}
	d.ifaces[libvirt.DomainInterfaceAddressesSrcAgent] = []libvirt.DomainInterface{{
		Name: "eth0", Hwaddr: libvirt.OptString{mac},
		Addrs: []libvirt.DomainIPAddr{{Type: int32(libvirt.IPAddrTypeIpv4), Addr: addr, Prefix: uint32(prefix)}},
	}}
	return nil
}
