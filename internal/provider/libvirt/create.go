package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// Progress details of a create, in the order its step goes.
const (
	progressStarting    = "preparing: checking the host's capacity"
	progressSeed        = "writing the NoCloud seed"
	progressOverlay     = "creating the disk overlay"
	progressDefine      = "defining and starting the domain"
	progressInterrupted = "create interrupted: Create resumes it"
)

// seedAllowance is what the capacity precheck counts for the seed ISO and
// the overlay's qcow2 metadata beside the disk itself.
const seedAllowance = 16 << 20

// plan is a Create request resolved against the config, before any dial.
type plan struct {
	host       Host
	machineKey string
	machine    MachineType
	image      imageRef
	// userData is the Proxy's cloud-init or the generated Squid
	// cloud-config; vendorData the serving reporter's and guest agent's
	// script (nocloud.VendorData) or the site's own.
	userData   provider.Sensitive
	vendorData provider.Sensitive
	// networkConfig is the seed's network-config: the request's static
	// address on the domain's NIC, matched by its MAC; empty (DHCP) without
	// one.
	networkConfig provider.Sensitive
}

// Create makes the domain named req.Name on the host placement.zone names,
// or adopts it. Everything that can be refused is refused before any dial
// (placement, the cloud-config). Then, under the name's lock: a create
// step in flight is joined; a domain of ours that exists is adopted (the
// UID guard) and started, resumed or woken when it is not running;
// otherwise the slow steps run in the background (createStep) and Create
// returns at once, Provisioning with their progress.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	pl, err := p.resolve(req)
	if err != nil {
		return provider.Instance{}, err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("host", pl.host.Name, "name", req.Name)
	ctx = logr.NewContext(ctx, log)
	log.V(2).Info("libvirt create resolved", "machineType", pl.machineKey, "vcpus", pl.machine.VCPUs,
		"memoryMiB", pl.machine.MemoryMiB, "image", pl.image.display(), "cloudInitBytes", len(pl.userData),
		"staticAddress", provider.DescribeStaticAddress(req.StaticAddress))

	unlock, err := p.names.Lock(ctx, req.Name)
	if err != nil {
		return provider.Instance{}, provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", req.Name, err)
	}
	defer unlock()
	id := formatID(pl.host.Name, req.Name)
	switch st := p.steps.Poll(req.Name); {
	case st.Err != nil:
		return provider.Instance{}, st.Err
	case st.Running:
		return provisioning(id, req.UID, st.Progress), nil
	}

	b, err := p.table.get(ctx, pl.host)
	if err != nil {
		return provider.Instance{}, err
	}
	dom, err := b.DomainLookupByName(ctx, req.Name)
	switch {
	case err == nil:
		return p.adopt(ctx, b, pl.host, dom, req)
	case !errors.Is(err, provider.ErrNotFound):
		return provider.Instance{}, err
	}
	p.creating.Add(req.Name, creatingInstance{host: pl.host.Name, uid: req.UID, since: p.now()})
	st, err := p.steps.Start(ctx, req.Name, progressStarting, func(ctx context.Context, progress func(string)) error {
		defer p.creating.Remove(req.Name)
		return p.createStep(ctx, pl, req, progress)
	})
	if err != nil {
		p.creating.Remove(req.Name)
		return provider.Instance{}, err
	}
	if st.Err != nil {
		return provider.Instance{}, st.Err
	}
	log.V(1).Info("libvirt create started in the background")
	return provisioning(id, req.UID, st.Progress), nil
}

// creatingInstance is a create step in flight, as ListByTag reports it.
type creatingInstance struct {
	host  string
	uid   string
	since time.Time
}

// provisioning is an instance whose create step runs.
func provisioning(id, uid, progress string) provider.Instance {
	return provider.Instance{ID: id, UID: uid, State: provider.StateProvisioning, Progress: progress}
}

// adopt takes over the existing domain dom named req.Name: only a domain
// with this installation's marks and req.UID (or no UID) is ours. One that
// does not run is started (shut off, crashed), resumed (paused: the seed
// latched such a Proxy until its spec changed) or woken (pmsuspended).
func (p *Provider) adopt(ctx context.Context, b backend, h Host, dom libvirt.Domain, req provider.CreateRequest) (provider.Instance, error) {
	md, err := p.readMarks(ctx, b, dom)
	if err != nil {
		return provider.Instance{}, reclassify(err, provider.ErrTransient, "the domain vanished while Create read it")
	}
	if err := provider.AdoptionError(provider.CheckAdoption(md.Marks, p.opts.InstallationID, req.UID), req.Name); err != nil {
		return provider.Instance{}, err
	}
	if md.Marks.UID == "" {
		// Ours but never told its Proxy (adopted before the UID was
		// written): the mark is completed, so the collector and the next
		// adoption see the owner.
		md.Marks.UID = req.UID
		x, err := buildMetadata(md.Marks, md.CreatedAt, req.Namespace, req.ProxyName, md.ServingReport)
		if err != nil {
			return provider.Instance{}, err
		}
		if err := b.DomainSetMetadata(ctx, dom, x, metadataKey, metadataURI, libvirt.DomainAffectConfig); err != nil {
			return provider.Instance{}, reclassify(err, provider.ErrTransient, "the domain vanished while Create wrote its UID mark")
		}
	}
	if err := p.ensureRunning(ctx, b, dom); err != nil {
		return provider.Instance{}, reclassify(err, provider.ErrTransient, "the domain vanished while Create started it")
	}
	inst, err := p.describe(ctx, b, h, dom, md)
	if err != nil {
		return provider.Instance{}, reclassify(err, provider.ErrTransient, "the domain vanished while Create read it")
	}
	if inst.UID == "" {
		inst.UID = req.UID
	}
	return inst, nil
}

// ensureRunning starts, resumes or wakes dom unless it runs. libvirt's
// "operation invalid" answer means another caller (or the host's
// autostart) got there first: the state is read again.
func (p *Provider) ensureRunning(ctx context.Context, b backend, dom libvirt.Domain) error {
	state, err := b.DomainGetState(ctx, dom)
	if err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx)
	var act func(context.Context, libvirt.Domain) error
	var what string
	switch state {
	case libvirt.DomainRunning, libvirt.DomainBlocked, libvirt.DomainNostate:
		return nil
	case libvirt.DomainPaused:
		act, what = b.DomainResume, "resumed"
	case libvirt.DomainPmsuspended:
		act, what = b.DomainPMWakeup, "woken"
	default: // shut off, crashed, shutting down
		act, what = b.DomainCreate, "started"
	}
	if err := act(ctx, dom); err != nil {
		if !hasCode(err, libvirt.ErrOperationInvalid) {
			return err
		}
		if now, err2 := b.DomainGetState(ctx, dom); err2 != nil || (now != libvirt.DomainRunning && now != libvirt.DomainBlocked) {
			return provider.Errorf(provider.ErrTransient, "domain %s: %w", dom.Name, err)
		}
	}
	log.V(1).Info("libvirt domain "+what, "from", stateName(state))
	return nil
}

// createStep is the slow part of a create, run in the background. Every
// part is idempotent and checks what is there, so a step interrupted at any
// point (a crash, a failure, a Delete's cancel) is resumed by the next:
// the capacity precheck, the seed (always rewritten: a cut-off upload is
// not trusted), the image, the overlay (reused only when it is exactly
// the one this instance needs), the domain, started. A volume or domain
// that vanishes under it fails the step Transient, never NotFound: the
// next Create makes it again.
//
// A cancel (Delete's, Close's) is honoured between libvirt calls, not
// inside one: a call cut off on our side would still run on the host, and
// could make a volume after Delete looked (seen on the real libvirtd), so
// Delete's wait for the step covers every call the step made. The image
// download, which takes minutes, stops at once.
func (p *Provider) createStep(ctx context.Context, pl plan, req provider.CreateRequest, progress func(string)) error {
	err := p.build(ctx, pl, req, progress)
	if errors.Is(err, provider.ErrNotFound) {
		return reclassify(err, provider.ErrTransient, "a volume or the domain vanished while the instance was being created; the next Create makes it again")
	}
	return err
}

func (p *Provider) build(stop context.Context, pl plan, req provider.CreateRequest, progress func(string)) error {
	h := pl.host
	// ctx is what the calls run under; stop says when to stop between them.
	ctx := context.WithoutCancel(stop)
	b, err := p.table.get(ctx, h)
	if err != nil {
		return err
	}
	pool, err := p.activePool(ctx, b, h)
	if err != nil {
		return err
	}
	domainType, err := p.domainType(ctx, b, h)
	if err != nil {
		return err
	}
	if err := p.precheck(ctx, stop, b, h, pool, pl); err != nil {
		return err
	}

	if err := stopped(stop); err != nil {
		return err
	}
	progress(progressSeed)
	seed, err := p.writeSeed(ctx, b, pool, pl, req)
	if err != nil {
		return err
	}
	if err := stopped(stop); err != nil {
		return err
	}
	image, err := p.ensureImage(stop, h, b, pool, pl.image, progress)
	if err != nil {
		return err
	}
	if err := stopped(stop); err != nil {
		return err
	}
	progress(progressOverlay)
	disk, err := p.ensureOverlay(ctx, b, pool, image, pl, req)
	if err != nil {
		return err
	}

	if err := stopped(stop); err != nil {
		return err
	}
	progress(progressDefine)
	metadata, err := buildMetadata(provider.Marks{Managed: true, UID: req.UID, Installation: p.opts.InstallationID},
		p.now(), req.Namespace, req.ProxyName, p.cfg.VendorData == "")
	if err != nil {
		return err
	}
	xml, err := buildDomainXML(domainSpec{
		Name: req.Name, DomainType: domainType, VCPUs: pl.machine.VCPUs, MemoryMiB: pl.machine.MemoryMiB,
		Firmware: pl.image.Firmware, Pool: h.Pool, DiskVolume: disk.Name, SeedVolume: seed.Name,
		MAC: domainMAC(req.Name), Bridge: h.Bridge, Network: h.Network, UserNetworking: h.UserNetworking,
		Metadata: metadata,
	})
	if err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("libvirt domain XML", "xml", xml)
	dom, err := b.DomainDefineXML(ctx, xml)
	if err != nil {
		return err
	}
	if err := p.ensureRunning(ctx, b, dom); err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("libvirt domain defined and started", "domainType", domainType)
	return nil
}

// stopped is the step's error once it was told to stop.
func stopped(stop context.Context) error {
	if err := stop.Err(); err != nil {
		return provider.Errorf(provider.ErrTransient, "create step stopped: %w", err)
	}
	return nil
}

// activePool looks up h's pool; one that is not running is Permanent
// until somebody starts it (virsh pool-start), which the message says.
func (p *Provider) activePool(ctx context.Context, b backend, h Host) (libvirt.StoragePool, error) {
	pool, err := b.StoragePoolLookupByName(ctx, h.Pool)
	if err != nil {
		return libvirt.StoragePool{}, err
	}
	info, err := b.StoragePoolGetInfo(ctx, pool)
	if err != nil {
		return libvirt.StoragePool{}, err
	}
	if info.State != libvirt.StoragePoolRunning {
		return libvirt.StoragePool{}, provider.Errorf(provider.ErrPermanent,
			"host %s: storage pool %s is %s, not running (virsh pool-start %s; pool-autostart keeps it so)",
			h.Name, h.Pool, poolStateName(info.State), h.Pool)
	}
	return pool, nil
}

// domainType is the host's configured domain type, or the detected one.
func (p *Provider) domainType(ctx context.Context, b backend, h Host) (string, error) {
	caps, err := b.ConnectGetCapabilities(ctx)
	if err != nil {
		return "", err
	}
	typ, _, err := chooseDomainType(h.DomainType, caps)
	if err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "host %s: %w", h.Name, err)
	}
	return typ, nil
}

// precheck refuses, with the figures, a create the host has no room for:
// the pool must hold the image (unless cached), the disk at its full size
// and the seed; the host's free memory the machine type's. Both are
// ErrQuotaExceeded, the class the reconciler reports as such. Thin
// provisioning makes the disk figure conservative: a pool that cannot hold
// every disk at its full size fills up later, inside a guest.
//
// stop bounds the one HTTP request (the image's size), ctx the calls.
func (p *Provider) precheck(ctx, stop context.Context, b backend, h Host, pool libvirt.StoragePool, pl plan) error {
	info, err := b.StoragePoolGetInfo(ctx, pool)
	if err != nil {
		return err
	}
	disk := uint64(p.cfg.DiskSizeGiB) << 30
	need := disk + seedAllowance
	parts := []string{fmt.Sprintf("disk %s", humanBytes(disk)), fmt.Sprintf("seed and metadata %s", humanBytes(seedAllowance))}
	if _, cached, err := p.cachedImage(ctx, b, pool, pl.image); err != nil {
		return err
	} else if !cached {
		size, err := p.imageDownloadSize(stop, pl.image)
		if err != nil {
			return err
		}
		if size > 0 {
			need += uint64(size)
			parts = append(parts, fmt.Sprintf("image %s %s, not cached yet", pl.image.display(), humanBytes(uint64(size))))
		}
	}
	if info.Available < need {
		return provider.Errorf(provider.ErrQuotaExceeded, "host %s: storage pool %s has %s free of %s, the instance needs %s (%s)",
			h.Name, h.Pool, humanBytes(info.Available), humanBytes(info.Capacity), humanBytes(need), strings.Join(parts, " + "))
	}
	free, err := b.NodeGetFreeMemory(ctx)
	if err != nil {
		return err
	}
	if mem := uint64(pl.machine.MemoryMiB) << 20; free < mem {
		return provider.Errorf(provider.ErrQuotaExceeded, "host %s has %s of memory free, machine type %s needs %s",
			h.Name, humanBytes(free), pl.machineKey, humanBytes(mem))
	}
	return nil
}

// writeSeed writes the instance's NoCloud seed afresh: a seed left by an
// interrupted step may be cut off, and rewriting a few hundred KiB is
// cheaper than proving it whole.
func (p *Provider) writeSeed(ctx context.Context, b backend, pool libvirt.StoragePool, pl plan, req provider.CreateRequest) (libvirt.StorageVol, error) {
	iso, err := nocloud.Build(nocloud.Seed{
		InstanceID: req.Name, LocalHostname: req.Name, UserData: pl.userData, VendorData: pl.vendorData,
		NetworkConfig: pl.networkConfig,
	})
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	name := seedName(req.Name, p.opts.InstallationID, req.UID)
	if err := deleteVolumeIfPresent(ctx, b, pool, name); err != nil {
		return libvirt.StorageVol{}, err
	}
	x, err := volumeXML(volumeSpec{Name: name, CapacityBytes: uint64(len(iso)), Format: FormatRaw})
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	vol, err := b.StorageVolCreateXML(ctx, pool, x)
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	if err := b.StorageVolUpload(ctx, vol, strings.NewReader(string(iso)), uint64(len(iso))); err != nil {
		// A cut-off seed is never used: the next step rewrites it.
		return libvirt.StorageVol{}, err
	}
	return vol, nil
}

// ensureOverlay makes the instance's qcow2 overlay on the cached image, or
// reuses the one there when it is exactly what this instance needs: the
// same backing image and format, the configured size. Anything else (an
// overlay on an older image, of another size, or not an overlay at all) is
// rebuilt; the earlier providers reused whatever had the name.
func (p *Provider) ensureOverlay(ctx context.Context, b backend, pool libvirt.StoragePool, image libvirt.StorageVol, pl plan, req provider.CreateRequest) (libvirt.StorageVol, error) {
	name := overlayName(req.Name, p.opts.InstallationID, req.UID)
	backing, err := b.StorageVolGetPath(ctx, image)
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	want := volumeSpec{Name: name, CapacityBytes: uint64(p.cfg.DiskSizeGiB) << 30, Format: FormatQCOW2,
		BackingPath: backing, BackingFormat: pl.image.Format}
	vol, err := b.StorageVolLookupByName(ctx, pool, name)
	switch {
	case err == nil:
		x, err := b.StorageVolGetXMLDesc(ctx, vol)
		if err != nil {
			return libvirt.StorageVol{}, err
		}
		have, err := parseVolumeXML(x)
		if err != nil {
			return libvirt.StorageVol{}, err
		}
		if overlayMatches(have, want) {
			return vol, nil
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("libvirt overlay does not match, rebuilt", "volume", name,
			"backing", have.BackingPath, "wantBacking", want.BackingPath, "capacity", have.CapacityBytes, "wantCapacity", want.CapacityBytes)
		if err := b.StorageVolDelete(ctx, vol); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return libvirt.StorageVol{}, err
		}
	case !errors.Is(err, provider.ErrNotFound):
		return libvirt.StorageVol{}, err
	}
	x, err := volumeXML(want)
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	return b.StorageVolCreateXML(ctx, pool, x)
}

// overlayMatches says whether an existing overlay is the one wanted.
func overlayMatches(have volumeDesc, want volumeSpec) bool {
	return have.Format == want.Format && have.BackingPath == want.BackingPath &&
		have.BackingFormat == want.BackingFormat && have.CapacityBytes == want.CapacityBytes
}

// deleteVolumeIfPresent deletes the volume named name in pool; a volume
// that is not there (or vanishes first) is fine.
func deleteVolumeIfPresent(ctx context.Context, b backend, pool libvirt.StoragePool, name string) error {
	vol, err := b.StorageVolLookupByName(ctx, pool, name)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.StorageVolDelete(ctx, vol); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	return nil
}

// resolve checks a request against the config without any I/O: the host
// (placement.zone, optional with one host), the machine type and the image
// (catalogue keys, or for the image an http(s) URL with its digest), and
// renders the user-data. Every refusal is Permanent and names the field.
func (p *Provider) resolve(req provider.CreateRequest) (plan, error) {
	var pl plan
	var err error
	if pl.host, err = p.placeHost(req.Placement.Zone); err != nil {
		return plan{}, err
	}
	pl.machineKey = req.Placement.MachineType
	if pl.machineKey == "" {
		pl.machineKey = p.cfg.DefaultMachineType
	}
	m, ok := p.cfg.MachineTypes[pl.machineKey]
	switch {
	case pl.machineKey == "":
		return plan{}, provider.Errorf(provider.ErrPermanent, "placement.machineType is required: this entry has several machine types (%s) and no defaultMachineType",
			strings.Join(config.SortedKeys(p.cfg.MachineTypes), ", "))
	case !ok:
		return plan{}, provider.Errorf(provider.ErrPermanent, "placement.machineType %q is not in this entry's machineTypes (%s)",
			pl.machineKey, strings.Join(config.SortedKeys(p.cfg.MachineTypes), ", "))
	}
	pl.machine = m
	if pl.image, err = p.placeImage(req.Placement.Image); err != nil {
		return plan{}, err
	}
	if pl.userData, err = squid.UserData(req, p.dest, pl.image.Family, servingreport.PublishFile); err != nil {
		return plan{}, err
	}
	if pl.networkConfig, err = p.networkConfig(pl.host, req); err != nil {
		return plan{}, err
	}
	if p.cfg.VendorData != "" {
		pl.vendorData = provider.Sensitive(p.cfg.VendorData)
	} else {
		// The generated cloud-config installs the reporter itself.
		pl.vendorData = nocloud.VendorData(nocloud.OwnCloudInitReporter(req, p.dest), p.cfg.InstallGuestAgent != nil && *p.cfg.InstallGuestAgent)
	}
	return pl, nil
}

// networkConfig is the seed's network-config for req on h: its static
// address on the NIC with the domain's MAC (domainMAC, which the domain XML
// gets too), so the guest takes it instead of asking DHCP and its agent
// reports it as the instance's address. QEMU's user-mode network has only
// the address its own DHCP hands out: a static address there is refused,
// and so is an IPv6 one, which Get would never report.
func (p *Provider) networkConfig(h Host, req provider.CreateRequest) (provider.Sensitive, error) {
	if req.StaticAddress == nil {
		return "", nil
	}
	if h.UserNetworking {
		return "", provider.Errorf(provider.ErrPermanent,
			"host %s has userNetworking, where the guest takes the address QEMU's DHCP gives it: a static address (%s, the entry's addressPool) needs a host on a bridge or a libvirt network", h.Name, req.StaticAddress)
	}
	if !req.StaticAddress.Address.Addr().Is4() {
		// Get reports the NIC's first routable IPv4 address (address).
		return "", provider.Errorf(provider.ErrPermanent, "staticAddress.address %s: not IPv4; the libvirt provider reports an instance's IPv4 address", req.StaticAddress.Address)
	}
	b, err := nocloud.NetworkConfig(*req.StaticAddress, domainMAC(req.Name))
	if err != nil {
		return "", err
	}
	return provider.Sensitive(b), nil
}

// placeHost is the host placement.zone names.
func (p *Provider) placeHost(zone string) (Host, error) {
	if zone == "" {
		if len(p.hosts) == 1 {
			return p.hosts[0], nil
		}
		return Host{}, provider.Errorf(provider.ErrPermanent, "placement.zone is required: this entry has %d hosts (%s)", len(p.hosts), p.hostNames())
	}
	if h, ok := p.host(zone); ok {
		return h, nil
	}
	return Host{}, provider.Errorf(provider.ErrPermanent, "placement.zone %q names no host of this entry (%s)", zone, p.hostNames())
}

func (p *Provider) hostNames() string {
	names := make([]string, len(p.hosts))
	for i, h := range p.hosts {
		names[i] = h.Name
	}
	return strings.Join(names, ", ")
}

// placeImage resolves placement.image: a catalogue key, or an http(s) URL
// whose fragment carries the digest and optionally the format and firmware
// (https://example.org/debian-12.qcow2#sha256=<64 hex>&format=qcow2&firmware=uefi;
// the fragment is never sent to the server). Empty is the default image.
func (p *Provider) placeImage(s string) (imageRef, error) {
	if s == "" {
		s = p.cfg.DefaultImage
	}
	if s == "" {
		return imageRef{}, provider.Errorf(provider.ErrPermanent, "placement.image is required: this entry has %s and no defaultImage",
			imageKeysPhrase(p.cfg.Images))
	}
	if img, ok := p.cfg.Images[s]; ok {
		family, _ := squid.ParseFamily(img.Family) // Validate proved it
		return imageRef{Key: s, URL: img.URL, SHA256: img.SHA256, Format: img.Format, Firmware: img.Firmware, Family: family}, nil
	}
	if !strings.Contains(s, "://") {
		return imageRef{}, provider.Errorf(provider.ErrPermanent, "placement.image %q is not in this entry's images (%s), nor an http(s) URL with #sha256=<digest>",
			s, strings.Join(config.SortedKeys(p.cfg.Images), ", "))
	}
	raw, frag, _ := strings.Cut(s, "#")
	if errs := validImageURL(nil, raw); len(errs) > 0 {
		return imageRef{}, provider.Errorf(provider.ErrPermanent, "placement.image: %s", strings.TrimPrefix(errs[0].ErrorBody(), ": "))
	}
	q, err := url.ParseQuery(frag)
	if err != nil {
		return imageRef{}, provider.Errorf(provider.ErrPermanent, "placement.image: the part after '#' must be sha256=<digest>[&format=qcow2|raw][&firmware=bios|uefi]")
	}
	img := imageRef{URL: raw, SHA256: q.Get("sha256"), Format: q.Get("format"), Firmware: q.Get("firmware"), Family: squid.FamilyDebian}
	if img.Format == "" {
		img.Format = DefaultImageFormat
	}
	if img.Firmware == "" {
		img.Firmware = DefaultFirmware
	}
	switch {
	case !sha256Hex.MatchString(img.SHA256):
		return imageRef{}, provider.Errorf(provider.ErrPermanent, "placement.image: an image given by URL needs its digest: %s#sha256=<64 lower-case hex digits>", raw)
	case img.Format != FormatQCOW2 && img.Format != FormatRaw:
		return imageRef{}, provider.Errorf(provider.ErrPermanent, "placement.image: format %q is not qcow2 or raw", img.Format)
	case img.Firmware != FirmwareBIOS && img.Firmware != FirmwareUEFI:
		return imageRef{}, provider.Errorf(provider.ErrPermanent, "placement.image: firmware %q is not bios or uefi", img.Firmware)
	}
	return img, nil
}

func imageKeysPhrase(m map[string]Image) string {
	if len(m) == 0 {
		return "no images"
	}
	return "images " + strings.Join(config.SortedKeys(m), ", ")
}

// display names the image in messages and progress: its key, or the URL's
// host and path (never its query, which may hold a token).
func (img imageRef) display() string {
	if img.Key != "" {
		return img.Key
	}
	u, err := url.Parse(img.URL)
	if err != nil {
		return "(image URL)"
	}
	return u.Host + u.Path
}

// humanBytes is a size for messages: GiB with one decimal from 1 GiB, else
// MiB.
func humanBytes(b uint64) string {
	if b >= 1<<30 {
		return gib(b) + " GiB"
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
