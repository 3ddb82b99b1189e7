package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/libvirthost"
)

// libvirtBackend soaks the libvirt provider (type kvm) against the real
// libvirtd of the libvirt test host (hack/libvirt, docs/testing.md), which
// the run must be inside of: test/soak/libvirt.sh brings the host up and
// runs the soak in its namespace, so the control plane, the manager, sshd
// and the image server share the namespace's loopback, and the guests
// reach nothing (the namespace has no route out).
//
// The count reads libvirtd itself over its own SSH connection, not the
// provider's listing (the thing under test): every domain whose marks
// name this installation, and every volume whose name carries this
// installation's tag (the overlays and the seed ISOs), UID-matched
// against the Proxies.
type libvirtBackend struct {
	s      *soak
	host   *libvirthost.Host
	block  json.RawMessage
	images *http.Server
}

// The kinds count reports: the provider's domains and its two volumes
// per instance.
var libvirtKinds = []string{"domains", "overlays", "seed-isos"}

// The provider's volume names (internal/provider/libvirt/volume.go, a
// stored format): <instance>_<tag>_<uid>_disk.qcow2 and ..._seed.iso,
// <tag> the first 10 hex digits of the SHA-256 of the installation ID.
const (
	volumeOverlaySuffix = "disk.qcow2"
	volumeSeedSuffix    = "seed.iso"
	// metadataURI is the namespace of the provider's marks element.
	metadataURI = "https://egress.proxy-operator.dev/libvirt/instance/v1"
)

func (b *libvirtBackend) prepare(ctx context.Context) error {
	path := os.Getenv(libvirthost.EnvVar)
	if path == "" {
		path = libvirthost.DefaultEnvFile
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the libvirt test host's env file: %w (`make soak SOAK_PROVIDER=libvirt` brings the host up and runs the soak inside it)", err)
	}
	h, err := libvirthost.Parse(data)
	if err != nil {
		return fmt.Errorf("env file %s: %w", path, err)
	}
	in, err := libvirthost.InNamespace(h.NetNS)
	if err != nil {
		return err
	}
	if !in {
		return fmt.Errorf("the soak runs outside the libvirt test host's namespace %s: run it with `make soak SOAK_PROVIDER=libvirt` (test/soak/libvirt.sh)", h.NetNS)
	}
	if err := libvirthost.Contained(); err != nil {
		return err
	}
	g, err := h.Guest()
	if err != nil {
		return err
	}
	b.host = h
	imageURL, err := b.serveImage(g)
	if err != nil {
		return err
	}
	b.block = h.ProviderConfig(h.Socket, imageURL, g)
	// The first check that the host answers, and a clean start: a run
	// killed before its teardown may have left this installation's
	// domains and volumes, which would be counted as this run's.
	if err := b.removeOurs(ctx, "left by an earlier run"); err != nil {
		return err
	}
	b.s.out.say("libvirt test host %s: libvirtd %s over ssh %s, pool %s, domain type %s; image %s", h.Name, h.Socket, h.SSHAddr, h.Pool, h.DomainType, imageURL)
	return nil
}

// serveImage serves the guest image on the namespace's loopback, where the
// provider downloads it from (once: the pool caches it).
func (b *libvirtBackend) serveImage(g libvirthost.Guest) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/guest.qcow2", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, g.Image) })
	b.images = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.images.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/guest.qcow2", nil
}

func (b *libvirtBackend) providersConfig() string {
	// The block is JSON, which YAML reads as a flow mapping.
	return "providers:\n  - name: " + entryName + "\n    type: " + libvirt.TypeKVM + "\n    " + libvirt.TypeKVM + ": " + string(b.block) + "\n"
}

func (b *libvirtBackend) namespaces() []string { return nil }

func (b *libvirtBackend) start(context.Context) error { return nil }

func (b *libvirtBackend) proxySpec() egressv1.ProxySpec {
	// The guests' clients come from the namespace's loopback, which a
	// guest on user-mode networking sees as SlirpHost.
	return egressv1.ProxySpec{Provider: entryName, Port: basePort, AllowedSourceRanges: []string{libvirthost.SlirpHost + "/32"}}
}

func (b *libvirtBackend) kinds() []string { return libvirtKinds }

// connect dials libvirtd the way the provider does (SSH, the host key
// pinned, a direct-streamlocal channel to the socket). Each use dials
// afresh: a run lasts long and the operator's kills never touch it, but a
// connection that died in between should not fail the count.
func (b *libvirtBackend) connect(ctx context.Context) (*golibvirt.Libvirt, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := b.host.DialSSH(ctx)
	if err != nil {
		return nil, nil, err
	}
	l := golibvirt.NewWithDialer(libvirthost.SocketDialer{Client: c, Path: b.host.Socket})
	if err := l.ConnectToURI(golibvirt.ConnectURI(b.host.URI)); err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("libvirt %s over ssh %s: %w", b.host.URI, b.host.SSHAddr, err)
	}
	return l, func() { _ = l.Disconnect(); _ = c.Close() }, nil
}

// marks is the provider's metadata element, matched by local name.
type marks struct {
	XMLName      xml.Name `xml:"instance"`
	Managed      string   `xml:"managed"`
	UID          string   `xml:"uid"`
	Installation string   `xml:"installation"`
}

// ourDomain is a domain with this installation's marks.
type ourDomain struct {
	dom golibvirt.Domain
	uid string
}

// ourVolume is a volume named with this installation's tag.
type ourVolume struct {
	name, instance, uid, kind string
}

// listOurs reads every domain's marks and the pool's volume names.
func (b *libvirtBackend) listOurs(l *golibvirt.Libvirt) ([]ourDomain, []ourVolume, error) {
	doms, _, err := l.ConnectListAllDomains(1, golibvirt.ConnectListDomainsActive|golibvirt.ConnectListDomainsInactive)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the domains: %w", err)
	}
	var ours []ourDomain
	for _, d := range doms {
		raw, err := l.DomainGetMetadata(d, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{metadataURI}, golibvirt.DomainAffectConfig)
		if isLibvirtError(err, golibvirt.ErrNoDomainMetadata) || isLibvirtError(err, golibvirt.ErrNoDomain) {
			continue // not the provider's, or gone since the listing
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the marks of domain %s: %w", d.Name, err)
		}
		var m marks
		if err := xml.Unmarshal([]byte(raw), &m); err != nil {
			return nil, nil, fmt.Errorf("domain %s: its marks %q: %w", d.Name, raw, err)
		}
		if m.Managed == provider.MarkManagedValue && m.Installation == installationID {
			ours = append(ours, ourDomain{dom: d, uid: m.UID})
		}
	}
	pool, err := l.StoragePoolLookupByName(b.host.Pool)
	if err != nil {
		return nil, nil, fmt.Errorf("pool %s: %w", b.host.Pool, err)
	}
	vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("listing pool %s: %w", b.host.Pool, err)
	}
	var ourVols []ourVolume
	for _, v := range vols {
		if ov, ok := parseVolume(v.Name, installationTag(installationID)); ok {
			ourVols = append(ourVols, ov)
		}
	}
	return ours, ourVols, nil
}

func installationTag(installation string) string {
	sum := sha256.Sum256([]byte(installation))
	return hex.EncodeToString(sum[:])[:10]
}

// parseVolume splits a volume name of this installation (tag); ok is
// false for any other (the image cache's, another installation's).
func parseVolume(name, tag string) (ourVolume, bool) {
	parts := strings.Split(name, "_")
	if len(parts) != 4 || parts[0] == "" || parts[1] != tag || parts[2] == "" {
		return ourVolume{}, false
	}
	v := ourVolume{name: name, instance: parts[0], uid: parts[2]}
	switch parts[3] {
	case volumeOverlaySuffix:
		v.kind = "overlays"
	case volumeSeedSuffix:
		v.kind = "seed-isos"
	default:
		return ourVolume{}, false
	}
	return v, true
}

// count: a domain or volume whose UID names no Proxy is leaked; a Proxy
// with two domains, or with volumes of an instance that is not one of its
// domains (a replaced instance's disk), has two instances.
func (b *libvirtBackend) count(ctx context.Context, exists map[string]string) (map[string][]leak, []string, error) {
	l, done, err := b.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	doms, vols, err := b.listOurs(l)
	if err != nil {
		return nil, nil, err
	}
	leaked := map[string][]leak{}
	instancesOf := map[string]map[string]bool{} // UID -> instance names
	add := func(uid, instance string) {
		if instancesOf[uid] == nil {
			instancesOf[uid] = map[string]bool{}
		}
		instancesOf[uid][instance] = true
	}
	for _, d := range doms {
		if _, ok := exists[d.uid]; !ok {
			leaked["domains"] = append(leaked["domains"], leak{desc: fmt.Sprintf("%s (uid %q)", d.dom.Name, d.uid), uid: d.uid})
			continue
		}
		add(d.uid, d.dom.Name)
	}
	for _, v := range vols {
		if _, ok := exists[v.uid]; !ok {
			leaked[v.kind] = append(leaked[v.kind], leak{desc: v.name, uid: v.uid})
			continue
		}
		add(v.uid, v.instance)
	}
	var duplicates []string
	for uid, names := range instancesOf {
		if len(names) > 1 {
			duplicates = append(duplicates, fmt.Sprintf("%s: %s", exists[uid], strings.Join(sortedKeys(names), ", ")))
		}
	}
	sort.Strings(duplicates)
	return leaked, duplicates, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// injectBound bounds an injected create: the first one also downloads the
// image into the pool.
const injectBound = 5 * time.Minute

// newInjector is the provider as the entry is, run in this process.
func (b *libvirtBackend) newInjector() (provider.Provider, error) {
	cfg, errs := libvirt.Parse(b.block, nil)
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return libvirt.New(entryName, cfg, provider.Options{InstallationID: installationID})
}

// settle: the injector's Create returned at once and runs the steps (seed,
// overlay, define, start) in this process; settle waits until the domain
// runs, and powers it off: a defined domain with its volumes is the same
// leak, and its guest would only take CPU from the run's.
func (b *libvirtBackend) settle(ctx context.Context, req provider.CreateRequest, inst provider.Instance) error {
	l, done, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	var dom golibvirt.Domain
	err = poll(ctx, injectBound, func() (bool, error) {
		if _, err := b.s.injector.Get(ctx, inst.ID); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return false, err // the create step failed
		}
		d, err := l.DomainLookupByName(req.Name)
		if isLibvirtError(err, golibvirt.ErrNoDomain) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		state, _, err := l.DomainGetState(d, 0)
		dom = d
		return err == nil && state == int32(golibvirt.DomainRunning), err
	})
	if err != nil {
		return fmt.Errorf("the injected domain %s: %w", req.Name, err)
	}
	if err := l.DomainDestroy(dom); err != nil {
		return fmt.Errorf("powering off the injected domain %s: %w", req.Name, err)
	}
	return nil
}

func (b *libvirtBackend) stop(ctx context.Context) error {
	var errs []error
	if b.host != nil {
		errs = append(errs, b.removeOurs(ctx, "at teardown"))
	}
	if b.images != nil {
		errs = append(errs, b.images.Close())
	}
	return errors.Join(errs...)
}

// removeOurs destroys and undefines every domain of this installation and
// deletes its volumes, so the host is left as the run found it (the image
// cache stays).
func (b *libvirtBackend) removeOurs(ctx context.Context, why string) error {
	l, done, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	doms, vols, err := b.listOurs(l)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range doms {
		if err := l.DomainDestroy(d.dom); err != nil && !isLibvirtError(err, golibvirt.ErrOperationInvalid) && !isLibvirtError(err, golibvirt.ErrNoDomain) {
			errs = append(errs, fmt.Errorf("destroying domain %s: %w", d.dom.Name, err))
		}
		if err := l.DomainUndefineFlags(d.dom, golibvirt.DomainUndefineNvram|golibvirt.DomainUndefineManagedSave|
			golibvirt.DomainUndefineSnapshotsMetadata|golibvirt.DomainUndefineCheckpointsMetadata); err != nil && !isLibvirtError(err, golibvirt.ErrNoDomain) {
			errs = append(errs, fmt.Errorf("undefining domain %s: %w", d.dom.Name, err))
		}
	}
	pool, err := l.StoragePoolLookupByName(b.host.Pool)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, v := range vols {
		// A volume libvirtd still builds refuses deletion for a moment.
		err := poll(ctx, time.Minute, func() (bool, error) {
			vol, err := l.StorageVolLookupByName(pool, v.name)
			if err == nil {
				err = l.StorageVolDelete(vol, 0)
			}
			return err == nil || isLibvirtError(err, golibvirt.ErrNoStorageVol), nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting volume %s: %w", v.name, err))
		}
	}
	if len(doms)+len(vols) > 0 {
		b.s.out.say("removed this installation's domains (%d) and volumes (%d) %s", len(doms), len(vols), why)
	}
	return errors.Join(errs...)
}

func isLibvirtError(err error, code golibvirt.ErrorNumber) bool {
	var le golibvirt.Error
	return errors.As(err, &le) && le.Code == uint32(code)
}
