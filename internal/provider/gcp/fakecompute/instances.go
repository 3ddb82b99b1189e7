package fakecompute

import (
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// namePattern is the API's resource name rule, and its message quotes it:
// "Invalid value for field 'resource.name': 'X'. Must be a match of regex
// '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'" (a Terraform error quoted in
// cockroachdb's terrafarm tests, and many gcloud logs).
const namePattern = `(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)`

var nameRE = regexp.MustCompile(`^` + namePattern + `$`)

func badName(field, name string) *APIError {
	return Invalid(field, name, "Must be a match of regex '"+namePattern+"'")
}

// instance is one VM. pb is kept in the form a GET answers.
type instance struct {
	pb         *computepb.Instance
	zone       string
	region     string
	cpus       int
	external   bool // has an access config (an ephemeral external IP)
	op         *operation
	natPending bool // RUNNING, external IP not yet assigned
	natDelay   int
	// natAddr is the reserved external address its access config holds
	// (natIP), ipAddr the reserved internal one its networkIP is; nil for
	// ephemeral addresses.
	natAddr *address
	ipAddr  *address
	// guestAttrs are the guest attributes its guest wrote, by
	// "<namespace>/<key>" (SetGuestAttribute).
	guestAttrs map[string]string
}

func instTarget(zone, name string) string { return "zones/" + zone + "/instances/" + name }

func (in *instance) target() string { return instTarget(in.zone, in.pb.GetName()) }

func (in *instance) status() string { return in.pb.GetStatus() }

func (in *instance) setStatus(st string) { in.pb.Status = proto.String(st) }

func (p *projectState) sortedInstances() []*instance {
	out := make([]*instance, 0, len(p.instances))
	for _, in := range p.instances {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].zone != out[j].zone {
			return out[i].zone < out[j].zone
		}
		return out[i].pb.GetName() < out[j].pb.GetName()
	})
	return out
}

// instanceRequest is what validation learnt from an insert body.
type instanceRequest struct {
	machineType string // short name
	mt          MachineType
	image       string // projects/<p>/global/images/...
	network     string // short name
	subnetwork  string // projects/<p>/regions/<r>/subnetworks/<s>
	external    bool
	natAddr     *address // the reserved address natIP names
	networkIP   string   // the internal IP asked for, "" for any
	ipAddr      *address // the reserved internal address networkIP is
}

// validateInstance checks an insert body the way the API does before it
// accepts the call, in its order: name, machine type, disks and image,
// network interfaces, tags, labels.
func (s *Server) validateInstance(p *projectState, zone string, in *computepb.Instance) (*instanceRequest, *APIError) {
	req := &instanceRequest{}
	switch {
	case in.GetName() == "":
		return nil, Required("resource.name")
	case !nameRE.MatchString(in.GetName()):
		return nil, badName("resource.name", in.GetName())
	}

	// Machine type: "zones/<z>/machineTypes/<t>" or the same as a URL.
	mtRef := in.GetMachineType()
	if mtRef == "" {
		return nil, Required("resource.machineType")
	}
	path, ok := resourcePath(p.id, mtRef)
	parts := strings.Split(path, "/")
	if !ok || len(parts) != 6 || parts[0] != "projects" || parts[2] != "zones" || parts[4] != "machineTypes" || parts[5] == "" {
		// The malformed-URL answer of cloud-foundation-toolkit#95 (for sourceImage).
		return nil, Invalid("resource.machineType", mtRef, "The URL is malformed.")
	}
	if parts[3] != zone {
		// Fake's own text: no source quotes the answer for a machine type of another zone.
		return nil, Invalid("resource.machineType", mtRef, fmt.Sprintf("Machine type zone '%s' does not match the instance zone '%s'.", parts[3], zone))
	}
	mt, ok := s.ix.cat.MachineTypes[parts[5]]
	if !ok || parts[1] != p.id {
		// gruntwork-io/terratest#1132.
		return nil, Invalid("resource.machineType", mtRef,
			fmt.Sprintf("Machine type with name '%s' does not exist in zone '%s'.", parts[5], zone))
	}
	req.machineType, req.mt = parts[5], mt

	// Disks: the first is the boot disk, made from an image.
	disks := in.GetDisks()
	if len(disks) == 0 {
		// The answer quoted in cloudpilot-ai/karpenter-provider-gcp's README.
		return nil, Invalid("resource.disks", "", "No disks are specified.")
	}
	if !disks[0].GetBoot() {
		// googleapis/nodejs-compute (createVM with disks): "Boot disk must be
		// the first disk attached to the instance."
		return nil, Invalid("resource.disks[0]", "", "Boot disk must be the first disk attached to the instance.")
	}
	if disks[0].GetSource() == "" {
		img := disks[0].GetInitializeParams().GetSourceImage()
		if img == "" {
			// Fake's own, in the required-field frame.
			return nil, Required("resource.disks[0].initializeParams.sourceImage")
		}
		ipath, ok := resourcePath(p.id, img)
		iparts := strings.Split(ipath, "/")
		if !ok || len(iparts) < 5 || iparts[2] != "global" || iparts[3] != "images" ||
			(iparts[4] == "family" && len(iparts) != 6) || (iparts[4] != "family" && len(iparts) != 5) {
			// cloud-foundation-toolkit#95: 'family/debian-9'. The URL is malformed.
			return nil, Invalid("resource.disks[0].initializeParams.sourceImage", img, "The URL is malformed.")
		}
		if !s.ix.images[ipath] {
			// Synchronous 404, googleapis/google-cloud-java#11032.
			return nil, NotFound(ipath)
		}
		req.image = ipath
	}

	// Network interfaces: one, on a network of the project.
	nics := in.GetNetworkInterfaces()
	if len(nics) == 0 {
		// Fake's own, in the required-field frame.
		return nil, Required("resource.networkInterfaces")
	}
	nic := nics[0]
	region := s.ix.zoneRegion[zone]
	netRef := nic.GetNetwork()
	if netRef == "" {
		netRef = "global/networks/default" // the API's default when neither is given
	}
	npath, ok := resourcePath(p.id, netRef)
	nparts := strings.Split(npath, "/")
	if !ok || len(nparts) != 5 || nparts[2] != "global" || nparts[3] != "networks" {
		return nil, Invalid("resource.networkInterfaces[0].network", netRef, "The URL is malformed.")
	}
	if nparts[1] != p.id || !s.ix.networks[nparts[4]] {
		return nil, NotFound(npath)
	}
	req.network = nparts[4]
	req.subnetwork = fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", p.id, region, req.network)
	if sub := nic.GetSubnetwork(); sub != "" {
		spath, ok := resourcePath(p.id, sub)
		sparts := strings.Split(spath, "/")
		if !ok || len(sparts) != 6 || sparts[2] != "regions" || sparts[4] != "subnetworks" {
			return nil, Invalid("resource.networkInterfaces[0].subnetwork", sub, "The URL is malformed.")
		}
		if sparts[1] != p.id || sparts[3] != region || sparts[5] != req.network {
			return nil, NotFound(spath)
		}
		req.subnetwork = spath
	}
	if len(nic.GetAccessConfigs()) > 1 {
		// googleapis/google-cloud-java#916 (the whole body).
		return nil, Invalid("resource.networkInterfaces[0]", "", "Multiple access configs are not supported.")
	}
	for i, ac := range nic.GetAccessConfigs() {
		if t := ac.GetType(); t != "" && t != "ONE_TO_ONE_NAT" {
			// Fake's own reason after the API's frame.
			return nil, Invalid(fmt.Sprintf("resource.networkInterfaces[0].accessConfigs[%d].type", i), t,
				"Must be ONE_TO_ONE_NAT.")
		}
		if ip := ac.GetNatIP(); ip != "" {
			// Only a reserved external address of the instance's region can
			// be named; an ephemeral one (even the instance's own) cannot.
			a := p.addressByIP(region, "EXTERNAL", ip)
			if a == nil {
				return nil, natIPNotFound(fmt.Sprintf("resource.networkInterfaces[0].accessConfigs[%d].natIP", i), ip, region)
			}
			req.natAddr = a
		}
	}
	req.external = len(nic.GetAccessConfigs()) > 0
	if ip := nic.GetNetworkIP(); ip != "" {
		if !internalRange.Contains(net.ParseIP(ip).To4()) {
			// Fake's own reason after the API's frame.
			return nil, Invalid("resource.networkInterfaces[0].networkIP", ip,
				"Requested internal IP address is not within the subnetwork's range "+internalRange.String()+".")
		}
		req.networkIP = ip
		req.ipAddr = p.addressByIP(region, "INTERNAL", ip)
	}

	for i, t := range in.GetTags().GetItems() {
		if !nameRE.MatchString(t) {
			return nil, badName(fmt.Sprintf("resource.tags.items[%d]", i), t)
		}
	}
	if e := validateLabels("resource.labels", in.GetLabels()); e != nil {
		return nil, e
	}
	return req, nil
}

// newInstance is the stored form of an accepted insert: what a GET answers.
func (s *Server) newInstance(p *projectState, zone string, body *computepb.Instance, req *instanceRequest, id uint64) *instance {
	pb := proto.Clone(body).(*computepb.Instance)
	name := pb.GetName()
	pb.Kind = proto.String("compute#instance")
	pb.Id = proto.Uint64(id)
	pb.CreationTimestamp = proto.String(s.timestamp())
	pb.Zone = proto.String(link("projects", p.id, "zones", zone))
	pb.SelfLink = proto.String(link("projects", p.id, instTarget(zone, name)))
	pb.MachineType = proto.String(link("projects", p.id, "zones", zone, "machineTypes", req.machineType))
	pb.Status = proto.String("PROVISIONING")
	pb.LabelFingerprint = proto.String(labelFingerprint(pb.GetLabels()))
	pb.Fingerprint = proto.String(fingerprint("instance", name, fmt.Sprint(id)))
	pb.CpuPlatform = proto.String("Unknown CPU Platform")
	pb.StartRestricted = proto.Bool(false)
	pb.DeletionProtection = proto.Bool(pb.GetDeletionProtection())
	for i, d := range pb.Disks {
		ip := d.GetInitializeParams()
		size := ip.GetDiskSizeGb()
		if size == 0 {
			size = 10
		}
		diskName := ip.GetDiskName()
		if diskName == "" {
			diskName = name
			if i > 0 {
				diskName = fmt.Sprintf("%s-%d", name, i)
			}
		}
		source := d.GetSource()
		if source == "" {
			source = link("projects", p.id, "zones", zone, "disks", diskName)
		}
		pb.Disks[i] = &computepb.AttachedDisk{
			Kind: proto.String("compute#attachedDisk"), Type: proto.String("PERSISTENT"),
			Mode: proto.String("READ_WRITE"), Source: proto.String(source),
			DeviceName: proto.String(fmt.Sprintf("persistent-disk-%d", i)), Index: proto.Int32(int32(i)),
			Boot: proto.Bool(d.GetBoot()), AutoDelete: proto.Bool(d.GetAutoDelete()),
			Interface: proto.String("SCSI"), DiskSizeGb: proto.Int64(size),
		}
	}
	for i, nic := range pb.NetworkInterfaces {
		nic.Kind = proto.String("compute#networkInterface")
		nic.Name = proto.String(fmt.Sprintf("nic%d", i))
		nic.Network = proto.String(link("projects", p.id, "global/networks", req.network))
		nic.Subnetwork = proto.String(linkBase + req.subnetwork)
		nic.StackType = proto.String("IPV4_ONLY")
		nic.Fingerprint = proto.String(fingerprint("nic", name, fmt.Sprint(i)))
		nic.NetworkIP = nil
		if i == 0 && req.networkIP != "" {
			nic.NetworkIP = proto.String(req.networkIP) // the asked-for address, at once
		}
		for _, ac := range nic.AccessConfigs {
			ac.Kind = proto.String("compute#accessConfig")
			ac.Type = proto.String("ONE_TO_ONE_NAT")
			if ac.GetName() == "" {
				ac.Name = proto.String("External NAT")
			}
			if ac.GetNetworkTier() == "" {
				ac.NetworkTier = proto.String("PREMIUM")
			}
			ac.NatIP = nil
			if i == 0 && req.natAddr != nil {
				// A reserved address is the instance's from the start, and
				// its tier is the address's.
				ac.NatIP = proto.String(req.natAddr.pb.GetAddress())
				ac.NetworkTier = proto.String(req.natAddr.pb.GetNetworkTier())
			}
		}
	}
	if pb.Metadata == nil {
		pb.Metadata = &computepb.Metadata{}
	}
	pb.Metadata.Kind = proto.String("compute#metadata")
	pb.Metadata.Fingerprint = proto.String(fingerprint("metadata", name))
	if pb.Tags == nil {
		pb.Tags = &computepb.Tags{}
	}
	pb.Tags.Fingerprint = proto.String(fingerprint(append([]string{"tags"}, pb.Tags.GetItems()...)...))
	if pb.Scheduling == nil {
		pb.Scheduling = &computepb.Scheduling{OnHostMaintenance: proto.String("MIGRATE"),
			AutomaticRestart: proto.Bool(true), Preemptible: proto.Bool(false), ProvisioningModel: proto.String("STANDARD")}
	}
	return &instance{pb: pb, zone: zone, region: s.ix.zoneRegion[zone], cpus: req.mt.CPUs, external: req.external}
}

// Addresses: internal ones from 10.128.0.0/20 (the default subnetwork's
// range in us-central1), external ones from TEST-NET-3 203.0.113.0/24. They
// are strings only: nothing listens on them and nothing should connect.
// Reserved addresses (addresses.go) come from the same ranges.

var (
	_, internalRange, _ = net.ParseCIDR("10.128.0.0/20")
	_, externalRange, _ = net.ParseCIDR("203.0.113.0/24")
)

func (s *Server) allocInternal(p *projectState) string {
	for i := 2; i < 16*256-1; i++ {
		ip := fmt.Sprintf("10.128.%d.%d", i/256, i%256)
		if i%256 != 0 && i%256 != 255 && !p.internal[ip] {
			p.internal[ip] = true
			return ip
		}
	}
	return ""
}

// allocExternal hands out external addresses round the range (next fit),
// so an instance started again gets another ephemeral address, as on GCE.
func (s *Server) allocExternal() string {
	for n := 0; n < 254; n++ {
		s.extCursor = s.extCursor%254 + 1
		ip := fmt.Sprintf("203.0.113.%d", s.extCursor)
		if !s.external[ip] {
			s.external[ip] = true
			return ip
		}
	}
	return ""
}

func nic0(in *instance) *computepb.NetworkInterface {
	if len(in.pb.GetNetworkInterfaces()) == 0 {
		return nil
	}
	return in.pb.NetworkInterfaces[0]
}

func (s *Server) assignInternal(p *projectState, in *instance) {
	if n := nic0(in); n != nil && n.GetNetworkIP() == "" {
		if ip := s.allocInternal(p); ip != "" {
			n.NetworkIP = proto.String(ip)
		}
	}
}

func (s *Server) assignExternal(in *instance) {
	n := nic0(in)
	if n == nil || len(n.AccessConfigs) == 0 {
		return
	}
	if in.natAddr != nil {
		n.AccessConfigs[0].NatIP = proto.String(in.natAddr.pb.GetAddress())
		in.natPending = false
		return
	}
	if ip := s.allocExternal(); ip != "" {
		n.AccessConfigs[0].NatIP = proto.String(ip)
		in.natPending = false
	}
}

// releaseExternal gives up an ephemeral external address (a stop); a
// reserved one stays with the stopped instance, as on GCE.
func (s *Server) releaseExternal(in *instance) {
	in.natPending = false
	if in.natAddr != nil {
		return
	}
	if n := nic0(in); n != nil && len(n.AccessConfigs) > 0 {
		delete(s.external, n.AccessConfigs[0].GetNatIP())
		n.AccessConfigs[0].NatIP = nil
	}
}

// release gives up every address of a deleted instance: ephemeral ones go
// back to the pool, reserved ones become RESERVED again.
func (s *Server) release(p *projectState, in *instance) {
	n := nic0(in)
	if a := in.natAddr; a != nil {
		a.unbind(in)
		in.natAddr = nil
		if n != nil && len(n.AccessConfigs) > 0 {
			n.AccessConfigs[0].NatIP = nil
		}
	}
	s.releaseExternal(in)
	if a := in.ipAddr; a != nil {
		a.unbind(in)
		in.ipAddr = nil
	} else if n != nil {
		delete(p.internal, n.GetNetworkIP())
	}
}

// bindAddresses gives an accepted instance the addresses it asked for: a
// reserved external or internal one turns IN_USE with the instance as its
// user; an internal IP outside any reservation is taken from the pool.
func (s *Server) bindAddresses(p *projectState, in *instance, req *instanceRequest) {
	if a := req.natAddr; a != nil {
		in.natAddr = a
		a.bind(in)
	}
	if a := req.ipAddr; a != nil {
		in.ipAddr = a
		a.bind(in)
	} else if req.networkIP != "" {
		p.internal[req.networkIP] = true
	}
}

// ipConflict is the address an insert asks for that another resource
// holds, or "".
func ipConflict(p *projectState, req *instanceRequest) string {
	if a := req.natAddr; a != nil && a.user != nil {
		return a.pb.GetAddress()
	}
	switch {
	case req.ipAddr != nil && req.ipAddr.user != nil:
		return req.networkIP
	case req.ipAddr == nil && req.networkIP != "" && p.internal[req.networkIP]:
		return req.networkIP
	}
	return ""
}

// stepBoot is a boot's middle: PROVISIONING becomes STAGING, and the
// internal address is allocated (GCE allocates it before the guest boots).
func (s *Server) stepBoot(p *projectState, in *instance) {
	if in.status() == "PROVISIONING" {
		in.setStatus("STAGING")
	}
	s.assignInternal(p, in)
}

// finishBoot is a boot's end: RUNNING, and the external address assigned
// now or knobs.addressDelay steps later.
func (s *Server) finishBoot(p *projectState, in *instance) {
	in.setStatus("RUNNING")
	in.pb.LastStartTimestamp = proto.String(s.timestamp())
	s.assignInternal(p, in)
	if in.external {
		if s.knobs.addressDelay > 0 && in.natAddr == nil {
			in.natPending, in.natDelay = true, s.knobs.addressDelay
		} else {
			s.assignExternal(in)
		}
	}
}

// tickAddress counts one step for a pending external address.
func (s *Server) tickAddress(p *projectState, in *instance) {
	if !in.natPending || in.status() != "RUNNING" {
		return
	}
	in.natDelay--
	if in.natDelay <= 0 {
		s.assignExternal(in)
	}
}

// ---- quota ----

var defaultRegionQuota = map[string]float64{
	// The default limits gcloud showed for a new project's region in
	// GoogleCloudPlatform/pubsec-declarative-toolkit#590.
	"CPUS": 24, "DISKS_TOTAL_GB": 4096, "STATIC_ADDRESSES": 8, "IN_USE_ADDRESSES": 8,
	"SSD_TOTAL_GB": 500, "INSTANCES": 24,
}

var regionQuotaOrder = []string{"CPUS", "DISKS_TOTAL_GB", "STATIC_ADDRESSES", "IN_USE_ADDRESSES", "SSD_TOTAL_GB", "INSTANCES"}

func (s *Server) regionLimit(region, metric string) float64 {
	if l, ok := s.knobs.regionQuota[region][metric]; ok {
		return l
	}
	return defaultRegionQuota[metric]
}

func (s *Server) regionUsage(p *projectState, region, metric string) float64 {
	var u float64
	for _, in := range p.instances {
		if in.region != region {
			continue
		}
		live := in.status() != "TERMINATED"
		switch metric {
		case "CPUS":
			if live {
				u += float64(in.cpus)
			}
		case "INSTANCES":
			u++
		case "IN_USE_ADDRESSES":
			if live && in.external {
				u++
			}
		case "DISKS_TOTAL_GB":
			for _, d := range in.pb.GetDisks() {
				u += float64(d.GetDiskSizeGb())
			}
		}
	}
	if metric == "STATIC_ADDRESSES" {
		// Static external addresses of the region, reserved or in use.
		for _, a := range p.addresses {
			if a.region == region && a.pb.GetAddressType() == "EXTERNAL" {
				u++
			}
		}
	}
	return u
}

// overQuota is the first regional metric an insert would exceed.
func (s *Server) overQuota(p *projectState, region string, req *instanceRequest) (metric string, limit float64) {
	need := map[string]float64{"CPUS": float64(req.mt.CPUs), "INSTANCES": 1}
	if req.external {
		need["IN_USE_ADDRESSES"] = 1
	}
	for _, m := range []string{"CPUS", "INSTANCES", "IN_USE_ADDRESSES"} {
		if n := need[m]; n > 0 {
			if l := s.regionLimit(region, m); s.regionUsage(p, region, m)+n > l {
				return m, l
			}
		}
	}
	return "", 0
}

// ---- handlers ----

func (s *Server) resolveInstance(w http.ResponseWriter, r *http.Request) (*projectState, string, string) {
	p := s.project(w, r)
	if p == nil {
		return nil, "", ""
	}
	zone := s.zone(w, r)
	if zone == "" {
		return nil, "", ""
	}
	return p, zone, r.PathValue("name")
}

func instResource(p *projectState, zone, name string) string {
	return "projects/" + p.id + "/" + instTarget(zone, name)
}

// storedInstance is the named instance, or nil after answering 404.
func storedInstance(w http.ResponseWriter, p *projectState, zone, name string) *instance {
	in := p.instances[zone+"/"+name]
	if in == nil {
		writeAPIError(w, NotFound(instResource(p, zone, name)))
	}
	return in
}

// instOpContext is what an operation on in renders its errors with.
func instOpContext(p *projectState, in *instance) opContext {
	return opContext{project: p.id, zone: in.zone, region: in.region, machineType: lastSegment(in.pb.GetMachineType())}
}

// insertInstance is instances.insert.
func (s *Server) insertInstance(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	zone := s.zone(w, r)
	if zone == "" || s.requestIDOp(w, r, p) {
		return
	}
	var body computepb.Instance
	if e := readProto(r, &body); e != nil {
		writeAPIError(w, e)
		return
	}
	req, e := s.validateInstance(p, zone, &body)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	name := body.GetName()
	key := zone + "/" + name
	if p.instances[key] != nil || p.reserved[key] != nil {
		writeAPIError(w, AlreadyExists(instResource(p, zone, name)))
		return
	}
	region := s.ix.zoneRegion[zone]
	metric, limit := s.overQuota(p, region, req)
	if metric != "" && s.knobs.quotaSync {
		writeAPIError(w, QuotaExceeded(metric, limit, region))
		return
	}
	id := s.nextID()
	op := s.newOp(p, "zones/"+zone, "insert", instTarget(zone, name), id)
	c := opContext{project: p.id, zone: zone, region: region, machineType: req.machineType, image: req.image, cpus: req.mt.CPUs}
	if metric != "" {
		c.limit = limit
		op.fail(QuotaExceededAsync(metric), c)
	} else if ip := ipConflict(p, req); ip != "" {
		op.fail(IPInUseByAnotherResource(ip), c)
	} else if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		if c.image == "" {
			c.image = body.GetDisks()[0].GetSource()
		}
		s.failWithFault(op, f.Async, c)
	}
	if op.errs != nil {
		// Accepted, but no instance comes of it: a GET answers 404 while the
		// operation runs (googleapis/nodejs-compute#377); the name stays
		// taken until it is DONE.
		p.reserved[key] = op
		op.failed = func() { delete(p.reserved, key) }
	} else {
		in := s.newInstance(p, zone, &body, req, id)
		p.instances[key] = in
		s.bindAddresses(p, in, req)
		op.inst = in
		op.step = func() { s.stepBoot(p, in) }
		op.done = func() { s.finishBoot(p, in) }
	}
	s.answerOp(w, r, p, op)
}

// getInstance is instances.get. It answers first, then counts one poll for
// the operations running on the instance (knobs.advanceOnGet).
func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil {
		return
	}
	key := zone + "/" + name
	in := p.instances[key]
	if in == nil {
		writeAPIError(w, NotFound(instResource(p, zone, name)))
		if p.reserved[key] != nil {
			s.touch(p, instTarget(zone, name))
		}
		return
	}
	writeProto(w, in.pb)
	if in.op != nil || s.hasInflight(p, in.target()) {
		s.touch(p, in.target())
	} else if s.knobs.advanceOnGet {
		s.tickAddress(p, in)
	}
}

func (s *Server) hasInflight(p *projectState, target string) bool {
	for _, op := range s.inflight {
		if op.project == p.id && op.target == target {
			return true
		}
	}
	return false
}

// busy answers the call on an instance another operation is running on.
func (s *Server) busy(w http.ResponseWriter, p *projectState, in *instance) bool {
	return notReady(w, in.op, instResource(p, in.zone, in.pb.GetName()))
}

// lifecycle starts an operation on in: from moves it to its first status at
// once, step and done move it on, and an injected async fault leaves it as
// it was.
func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request, p *projectState, in *instance, opType string,
	first string, step, done func()) {
	op := s.newOp(p, "zones/"+in.zone, opType, in.target(), in.pb.GetId())
	op.inst = in
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		s.failWithFault(op, f.Async, instOpContext(p, in))
	} else {
		if first != "" {
			in.setStatus(first)
		}
		op.step, op.done = step, done
	}
	s.answerOp(w, r, p, op)
}

// noop is an accepted call that changes nothing (start of a RUNNING
// instance): an operation that runs and ends DONE.
func (s *Server) noop(w http.ResponseWriter, r *http.Request, p *projectState, in *instance, opType string) {
	op := s.newOp(p, "zones/"+in.zone, opType, in.target(), in.pb.GetId())
	s.answerOp(w, r, p, op)
}

// deleteInstance is instances.delete: STOPPING at once, gone when the
// operation is DONE.
func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return
	}
	if in.op != nil && in.op.pb.GetOperationType() == "delete" {
		s.repeatDelete(w, r, p, in)
		return
	}
	if s.busy(w, p, in) {
		return
	}
	key := zone + "/" + name
	s.lifecycle(w, r, p, in, "delete", "STOPPING", nil, func() {
		s.release(p, in)
		delete(p.instances, key)
	})
}

func (s *Server) repeatDelete(w http.ResponseWriter, r *http.Request, p *projectState, in *instance) {
	switch s.knobs.repeatDelete {
	case RepeatDeleteNotReady:
		writeAPIError(w, ResourceNotReady(instResource(p, in.zone, in.pb.GetName())))
	case RepeatDeleteNewOperation:
		// A second operation that ends with the first; polling it polls the first.
		op := s.newOp(p, "zones/"+in.zone, "delete", in.target(), in.pb.GetId())
		op.leader = in.op
		in.op.followers = append(in.op.followers, op)
		s.ops[opKey(op.project, op.scope, op.pb.GetName())] = op
		s.rememberRequestID(r, p, op)
		writeProto(w, op.pb)
	default:
		writeAPIError(w, RateLimitExceeded().render("", fmt.Sprint(p.number)))
	}
}

// startInstance is instances.start: a TERMINATED instance boots again
// (PROVISIONING, STAGING, RUNNING) with a new external address; a RUNNING
// one is left as it is.
func (s *Server) startInstance(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return
	}
	if s.busy(w, p, in) {
		return
	}
	switch in.status() {
	case "RUNNING":
		s.noop(w, r, p, in, "start")
	case "TERMINATED":
		s.lifecycle(w, r, p, in, "start", "PROVISIONING", func() { s.stepBoot(p, in) }, func() { s.finishBoot(p, in) })
	case "SUSPENDED":
		// Fake's own text: a suspended instance is resumed, not started.
		writeAPIError(w, &APIError{Code: http.StatusBadRequest, Reason: "invalid", Domain: "global",
			Message: fmt.Sprintf("Instance '%s' is suspended. Use the resume method to resume it.", name)})
	default:
		writeAPIError(w, ResourceNotReady(instResource(p, zone, name)))
	}
}

// stopInstance is instances.stop: STOPPING, then TERMINATED without its
// external address (an ephemeral address is released; the internal one is
// kept).
func (s *Server) stopInstance(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return
	}
	if s.busy(w, p, in) {
		return
	}
	if in.status() == "TERMINATED" {
		s.noop(w, r, p, in, "stop")
		return
	}
	s.lifecycle(w, r, p, in, "stop", "STOPPING", nil, func() {
		in.setStatus("TERMINATED")
		in.pb.LastStopTimestamp = proto.String(s.timestamp())
		s.releaseExternal(in)
	})
}

// suspendInstance is instances.suspend: SUSPENDING, then SUSPENDED.
func (s *Server) suspendInstance(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return
	}
	if s.busy(w, p, in) {
		return
	}
	switch in.status() {
	case "SUSPENDED":
		s.noop(w, r, p, in, "suspend")
	case "RUNNING":
		s.lifecycle(w, r, p, in, "suspend", "SUSPENDING", nil, func() {
			in.setStatus("SUSPENDED")
			in.pb.LastSuspendedTimestamp = proto.String(s.timestamp())
		})
	default:
		// Fake's own text.
		writeAPIError(w, &APIError{Code: http.StatusBadRequest, Reason: "invalid", Domain: "global",
			Message: fmt.Sprintf("Instance '%s' is not running.", name)})
	}
}

// resumeInstance is instances.resume: a SUSPENDED instance goes STAGING,
// then RUNNING, keeping its addresses.
func (s *Server) resumeInstance(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return
	}
	if s.busy(w, p, in) {
		return
	}
	switch in.status() {
	case "RUNNING":
		s.noop(w, r, p, in, "resume")
	case "SUSPENDED":
		s.lifecycle(w, r, p, in, "resume", "STAGING", nil, func() {
			in.setStatus("RUNNING")
			in.pb.LastStartTimestamp = proto.String(s.timestamp())
			if in.external && nic0(in).AccessConfigs[0].GetNatIP() == "" {
				s.assignExternal(in)
			}
		})
	default:
		// Fake's own text.
		writeAPIError(w, &APIError{Code: http.StatusBadRequest, Reason: "invalid", Domain: "global",
			Message: fmt.Sprintf("Instance '%s' is not suspended.", name)})
	}
}

// setLabels is instances.setLabels: the fingerprint must be the current
// one (412 conditionNotMet otherwise, also for an empty one); the labels
// change at once and a new fingerprint follows.
func (s *Server) setLabels(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	var body computepb.InstancesSetLabelsRequest
	if e := readProto(r, &body); e != nil {
		writeAPIError(w, e)
		return
	}
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return
	}
	if e := validateLabels("labels", body.GetLabels()); e != nil {
		writeAPIError(w, e)
		return
	}
	if body.GetLabelFingerprint() != in.pb.GetLabelFingerprint() {
		writeAPIError(w, ConditionNotMet())
		return
	}
	op := s.newOp(p, "zones/"+zone, "setLabels", in.target(), in.pb.GetId())
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		op.fail(f.Async, instOpContext(p, in))
	} else {
		in.pb.Labels = body.GetLabels()
		in.pb.LabelFingerprint = proto.String(labelFingerprint(in.pb.GetLabels()))
	}
	s.answerOp(w, r, p, op)
}

func lastSegment(u string) string { return u[strings.LastIndex(u, "/")+1:] }

// ---- seeding, for tests ----

// PutInstance adds an instance as if it had been created long ago: body is
// an insert body (validated like one), status is its status ("" is
// RUNNING); a RUNNING or SUSPENDED one has its addresses. For adoption
// tests: a stopped or suspended instance of ours, one of someone else.
func (s *Server) PutInstance(project, zone string, body *computepb.Instance, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projects[project]
	if p == nil {
		return NotFound("projects/" + project)
	}
	if _, ok := s.ix.zoneRegion[zone]; !ok {
		return unknownZone(zone)
	}
	req, e := s.validateInstance(p, zone, body)
	if e != nil {
		return e
	}
	key := zone + "/" + body.GetName()
	if p.instances[key] != nil {
		return AlreadyExists(instResource(p, zone, body.GetName()))
	}
	if ip := ipConflict(p, req); ip != "" {
		return fmt.Errorf("IP '%s' is already being used by another resource", ip)
	}
	in := s.newInstance(p, zone, body, req, s.nextID())
	p.instances[key] = in
	s.bindAddresses(p, in, req)
	if status == "" {
		status = "RUNNING"
	}
	switch status {
	case "RUNNING", "SUSPENDED", "SUSPENDING", "STOPPING":
		s.assignInternal(p, in)
		if in.external {
			s.assignExternal(in)
		}
	case "STAGING", "TERMINATED":
		s.assignInternal(p, in)
	}
	in.setStatus(status)
	return nil
}

// SetInstanceStatus changes an instance's status directly (a stop or a
// host error nobody asked for); TERMINATED releases its external address.
func (s *Server) SetInstanceStatus(project, zone, name, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projects[project]
	if p == nil {
		return NotFound("projects/" + project)
	}
	in := p.instances[zone+"/"+name]
	if in == nil {
		return NotFound(instResource(p, zone, name))
	}
	in.setStatus(status)
	if status == "TERMINATED" {
		s.releaseExternal(in)
	}
	return nil
}
