package fakecompute

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Regional static addresses (addresses.insert, get, delete, list,
// aggregatedList, setLabels) and their link to instances, as the compute v1
// discovery document describes them (testdata/discovery-addresses.json) and
// GCE answers:
//
//   - insert answers a regional operation; the address is RESERVING while it
//     runs and RESERVED when it is DONE. An EXTERNAL address comes from
//     203.0.113.0/24, an INTERNAL one from 10.128.0.0/20 (the fake's only
//     subnetwork range); "address" asks for a given IP of those ranges.
//     Asking for the ephemeral IP an instance of the region holds promotes
//     it: the address is IN_USE by that instance from the start.
//   - An instance holds an address through its access config's natIP
//     (EXTERNAL) or its networkIP (INTERNAL), on insert or addAccessConfig:
//     the address is IN_USE with users naming the instance, and RESERVED
//     again, users empty, after deleteAccessConfig or the instance's delete.
//     A stopped instance keeps it.
//   - delete of an IN_USE address is refused (400
//     resourceInUseByAnotherResource); a second call on an address whose
//     operation runs is 400 resourceNotReady.
//   - Static EXTERNAL addresses count against the region's STATIC_ADDRESSES
//     quota (SetRegionQuota; default 8, a new project's): an insert over it
//     fails its operation with QUOTA_EXCEEDED (or 403 quotaExceeded with
//     SetQuotaSynchronous).
//
// Not modelled: global addresses (the aggregated list's "global" scope is
// always empty), IPv6, purposes beyond echoing them, the network field,
// prefixLength, move, ipCollection (BYOIP), and addresses named by id.

// address is one regional static address; pb is kept in the form a GET
// answers, its status and users following the state (sync).
type address struct {
	pb        *computepb.Address
	region    string
	op        *operation
	reserving bool      // its insert operation runs
	user      *instance // the instance holding it
}

func addrTarget(region, name string) string { return "regions/" + region + "/addresses/" + name }

func addrResource(p *projectState, region, name string) string {
	return "projects/" + p.id + "/" + addrTarget(region, name)
}

func (a *address) target() string { return addrTarget(a.region, a.pb.GetName()) }

func (a *address) external() bool { return a.pb.GetAddressType() == "EXTERNAL" }

// sync sets status and users from the state.
func (a *address) sync() {
	switch {
	case a.reserving:
		a.pb.Status = proto.String("RESERVING")
	case a.user != nil:
		a.pb.Status = proto.String("IN_USE")
	default:
		a.pb.Status = proto.String("RESERVED")
	}
	a.pb.Users = nil
	if a.user != nil {
		a.pb.Users = []string{a.user.pb.GetSelfLink()}
	}
}

func (a *address) bind(in *instance) {
	a.user = in
	a.sync()
}

func (a *address) unbind(in *instance) {
	if a.user == in {
		a.user = nil
	}
	a.sync()
}

// deleting: a delete operation runs on it; it can no longer be taken.
func (a *address) deleting() bool { return a.op != nil && a.op.pb.GetOperationType() == "delete" }

// addressByIP is the reserved address of region and type (EXTERNAL,
// INTERNAL) with this IP, or nil.
func (p *projectState) addressByIP(region, typ, ip string) *address {
	for _, a := range p.addresses {
		if a.region == region && a.pb.GetAddressType() == typ && a.pb.GetAddress() == ip && !a.deleting() {
			return a
		}
	}
	return nil
}

func (p *projectState) sortedAddresses() []*address {
	out := make([]*address, 0, len(p.addresses))
	for _, a := range p.addresses {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].region != out[j].region {
			return out[i].region < out[j].region
		}
		return out[i].pb.GetName() < out[j].pb.GetName()
	})
	return out
}

// addressRequest is what validation learnt from an insert body.
type addressRequest struct {
	ip     string    // the IP asked for, "" for any
	holder *instance // the instance of the region holding ip (a promotion)
	taken  bool      // ip is another resource's
}

// validateAddress checks an insert body and fills in what the API fills
// in (addressType EXTERNAL, networkTier PREMIUM, for INTERNAL the region's
// default subnetwork and purpose GCE_ENDPOINT). The reasons marked fake's
// own are in the API's invalid-value frame; no source quotes them.
func (s *Server) validateAddress(p *projectState, region string, a *computepb.Address) (*addressRequest, *APIError) {
	switch {
	case a.GetName() == "":
		return nil, Required("resource.name")
	case !nameRE.MatchString(a.GetName()):
		return nil, badName("resource.name", a.GetName())
	}
	switch a.GetAddressType() {
	case "", "EXTERNAL":
		a.AddressType = proto.String("EXTERNAL")
	case "INTERNAL":
	default:
		return nil, Invalid("resource.addressType", a.GetAddressType(), "Must be EXTERNAL or INTERNAL.") // fake's own
	}
	external := a.GetAddressType() == "EXTERNAL"
	switch t := a.GetNetworkTier(); {
	case t == "":
		a.NetworkTier = proto.String("PREMIUM")
	case t == "PREMIUM", t == "STANDARD" && external:
	default:
		return nil, Invalid("resource.networkTier", t, "Must be PREMIUM or STANDARD; internal addresses are PREMIUM.") // fake's own
	}
	if external {
		if sub := a.GetSubnetwork(); sub != "" {
			// The frame of hashicorp/terraform-provider-google#9649 ("Invalid value
			// for field 'resource.purpose': 'VPC_PEERING'. The field cannot be
			// specified with external address."), said of subnetwork here.
			return nil, Invalid("resource.subnetwork", sub, "The field cannot be specified with external address.")
		}
	} else {
		sub := a.GetSubnetwork()
		if sub == "" {
			sub = "regions/" + region + "/subnetworks/default"
		}
		spath, ok := resourcePath(p.id, sub)
		sparts := strings.Split(spath, "/")
		if !ok || len(sparts) != 6 || sparts[2] != "regions" || sparts[4] != "subnetworks" {
			return nil, Invalid("resource.subnetwork", sub, "The URL is malformed.")
		}
		if sparts[1] != p.id || sparts[3] != region || !s.ix.networks[sparts[5]] {
			return nil, NotFound(spath)
		}
		a.Subnetwork = proto.String(linkBase + spath)
		if a.GetPurpose() == "" {
			a.Purpose = proto.String("GCE_ENDPOINT")
		}
	}
	if e := validateLabels("resource.labels", a.GetLabels()); e != nil {
		return nil, e
	}
	req := &addressRequest{}
	ip := a.GetAddress()
	if ip == "" {
		return req, nil
	}
	v4 := net.ParseIP(ip).To4()
	if v4 == nil {
		return nil, Invalid("resource.address", ip, "Must be an IPv4 address.") // fake's own
	}
	if external && !externalRange.Contains(v4) {
		// Fake's own: GCE hands out external addresses; only its own (the
		// fake's range stands for them) can be asked for.
		return nil, Invalid("resource.address", ip, fmt.Sprintf("The IP address is not available to this project in region '%s'.", region))
	}
	if !external && !internalRange.Contains(v4) {
		return nil, Invalid("resource.address", ip,
			"Requested internal IP address is not within the subnetwork's range "+internalRange.String()+".") // fake's own
	}
	req.ip = ip
	req.holder, req.taken = s.ipHolder(p, region, external, ip)
	return req, nil
}

// ipHolder says who has ip: an instance of this project and region holding
// it as an ephemeral address (which a reservation promotes), or anything
// else (another address, an instance elsewhere): taken.
func (s *Server) ipHolder(p *projectState, region string, external bool, ip string) (*instance, bool) {
	for _, q := range s.projects {
		for _, a := range q.addresses {
			if a.external() == external && a.pb.GetAddress() == ip && (external || q == p) {
				return nil, true
			}
		}
	}
	for _, q := range s.projects {
		if !external && q != p {
			continue
		}
		for _, in := range q.instances {
			n := nic0(in)
			if n == nil {
				continue
			}
			held := n.GetNetworkIP() == ip && in.ipAddr == nil
			if external {
				held = len(n.AccessConfigs) > 0 && n.AccessConfigs[0].GetNatIP() == ip && in.natAddr == nil
			}
			if held {
				if q == p && in.region == region {
					return in, false
				}
				return nil, true
			}
		}
	}
	if external {
		return nil, s.external[ip]
	}
	return nil, p.internal[ip]
}

// insertAddress is addresses.insert.
func (s *Server) insertAddress(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	region := s.region(w, r)
	if region == "" || s.requestIDOp(w, r, p) {
		return
	}
	var body computepb.Address
	if e := readProto(r, &body); e != nil {
		writeAPIError(w, e)
		return
	}
	req, e := s.validateAddress(p, region, &body)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	name := body.GetName()
	key := region + "/" + name
	if p.addresses[key] != nil || p.addrPending[key] != nil {
		writeAPIError(w, AlreadyExists(addrResource(p, region, name)))
		return
	}
	external := body.GetAddressType() == "EXTERNAL"
	var overQuota bool
	limit := s.regionLimit(region, "STATIC_ADDRESSES")
	if external && s.regionUsage(p, region, "STATIC_ADDRESSES")+1 > limit {
		if s.knobs.quotaSync {
			writeAPIError(w, QuotaExceeded("STATIC_ADDRESSES", limit, region))
			return
		}
		overQuota = true
	}
	id := s.nextID()
	op := s.newOp(p, "regions/"+region, "insert", addrTarget(region, name), id)
	c := opContext{project: p.id, region: region, limit: limit}
	switch {
	case overQuota:
		op.fail(QuotaExceededAsync("STATIC_ADDRESSES"), c)
	case req.taken:
		op.fail(IPInUseByAnotherResource(req.ip), c)
	default:
		if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
			s.failWithFault(op, f.Async, c)
		}
	}
	if op.errs == nil {
		ip := req.ip
		if ip == "" && external {
			ip = s.allocExternal()
		} else if ip == "" {
			ip = s.allocInternal(p)
		}
		if ip == "" {
			// Fake's own: the fake's range is used up; the API's answer to an
			// exhausted region is not modelled.
			writeAPIError(w, BackendError())
			return
		}
		if external {
			s.external[ip] = true
		} else {
			p.internal[ip] = true
		}
		a := s.newAddress(p, region, &body, ip, id)
		a.reserving = true
		if in := req.holder; in != nil {
			s.promote(a, in)
		}
		a.sync()
		op.addr = a
		op.done = func() {
			a.reserving = false
			a.sync()
		}
	} else {
		// Accepted, but no address comes of it: a GET answers 404 while the
		// operation runs; the name stays taken until it is DONE.
		p.addrPending[key] = op
		op.failed = func() { delete(p.addrPending, key) }
	}
	s.answerOp(w, r, p, op)
}

// newAddress stores an accepted address in the form a GET answers.
func (s *Server) newAddress(p *projectState, region string, body *computepb.Address, ip string, id uint64) *address {
	pb := proto.Clone(body).(*computepb.Address)
	name := pb.GetName()
	pb.Kind = proto.String("compute#address")
	pb.Id = proto.Uint64(id)
	pb.CreationTimestamp = proto.String(s.timestamp())
	pb.Address = proto.String(ip)
	pb.Region = proto.String(link("projects", p.id, "regions", region))
	pb.SelfLink = proto.String(link("projects", p.id, addrTarget(region, name)))
	pb.LabelFingerprint = proto.String(labelFingerprint(pb.GetLabels()))
	a := &address{pb: pb, region: region}
	p.addresses[region+"/"+name] = a
	a.sync()
	return a
}

// promote makes the ephemeral address in holds the reserved a.
func (s *Server) promote(a *address, in *instance) {
	if a.external() {
		in.natAddr = a
	} else {
		in.ipAddr = a
	}
	a.bind(in)
}

// findAddress is the request's address, or nil after answering 404 (or
// 400 for an unknown region).
func (s *Server) findAddress(w http.ResponseWriter, r *http.Request) (*projectState, *address) {
	p := s.project(w, r)
	if p == nil {
		return nil, nil
	}
	region := s.region(w, r)
	if region == "" {
		return p, nil
	}
	name := r.PathValue("name")
	a := p.addresses[region+"/"+name]
	if a == nil {
		writeAPIError(w, NotFound(addrResource(p, region, name)))
		if p.addrPending[region+"/"+name] != nil {
			s.touch(p, addrTarget(region, name))
		}
	}
	return p, a
}

// getAddress is addresses.get. Like an instance GET it answers first, then
// counts one poll for the operations running on the address.
func (s *Server) getAddress(w http.ResponseWriter, r *http.Request) {
	if p, a := s.findAddress(w, r); a != nil {
		s.answerGet(w, p, a.pb, a.target())
	}
}

// deleteAddress is addresses.delete: refused while IN_USE; gone when the
// operation is DONE, its IP back in the pool.
func (s *Server) deleteAddress(w http.ResponseWriter, r *http.Request) {
	if s.answeredEarly(w, r) {
		return
	}
	p, a := s.findAddress(w, r)
	if a == nil || notReady(w, a.op, addrResource(p, a.region, a.pb.GetName())) {
		return
	}
	name := a.pb.GetName()
	if in := a.user; in != nil {
		writeAPIError(w, ResourceInUseByAnotherResource("address", addrResource(p, a.region, name),
			instResource(p, in.zone, in.pb.GetName())))
		return
	}
	op := s.newOp(p, "regions/"+a.region, "delete", a.target(), a.pb.GetId())
	op.addr = a
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		op.fail(f.Async, opContext{project: p.id, region: a.region})
	} else {
		op.done = func() {
			delete(p.addresses, a.region+"/"+name)
			if a.external() {
				delete(s.external, a.pb.GetAddress())
			} else {
				delete(p.internal, a.pb.GetAddress())
			}
		}
	}
	s.answerOp(w, r, p, op)
}

// setAddressLabels is addresses.setLabels: as instances.setLabels, the
// fingerprint must be the current one (412 conditionNotMet otherwise) and
// the labels change at once.
func (s *Server) setAddressLabels(w http.ResponseWriter, r *http.Request) {
	if s.answeredEarly(w, r) {
		return
	}
	var body computepb.RegionSetLabelsRequest
	if e := readProto(r, &body); e != nil {
		writeAPIError(w, e)
		return
	}
	p, a := s.findAddress(w, r)
	if a == nil {
		return
	}
	if e := validateLabels("labels", body.GetLabels()); e != nil {
		writeAPIError(w, e)
		return
	}
	if body.GetLabelFingerprint() != a.pb.GetLabelFingerprint() {
		writeAPIError(w, ConditionNotMet())
		return
	}
	op := s.newOp(p, "regions/"+a.region, "setLabels", a.target(), a.pb.GetId())
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		op.fail(f.Async, opContext{project: p.id, region: a.region})
	} else {
		a.pb.Labels = body.GetLabels()
		a.pb.LabelFingerprint = proto.String(labelFingerprint(a.pb.GetLabels()))
	}
	s.answerOp(w, r, p, op)
}

// addressField reads a filterable field of an address (nil: only says
// which fields exist).
func addressField(a *computepb.Address, field string) (string, bool, bool) {
	if k, ok := strings.CutPrefix(field, "labels."); ok {
		v, set := a.GetLabels()[k]
		return v, set, true
	}
	var v string
	switch field {
	case "name":
		v = a.GetName()
	case "status":
		v = a.GetStatus()
	case "address":
		v = a.GetAddress()
	case "addressType":
		v = a.GetAddressType()
	case "region":
		v = a.GetRegion()
	case "networkTier":
		v = a.GetNetworkTier()
	case "purpose":
		v = a.GetPurpose()
	case "subnetwork":
		v = a.GetSubnetwork()
	case "description":
		v = a.GetDescription()
	case "id":
		if a.Id != nil {
			v = strconv.FormatUint(a.GetId(), 10)
		}
	case "selfLink":
		v = a.GetSelfLink()
	case "creationTimestamp":
		v = a.GetCreationTimestamp()
	case "labelFingerprint":
		v = a.GetLabelFingerprint()
	default:
		return "", false, false
	}
	return v, v != "", true
}

func addressGetter(a *computepb.Address) fieldGetter {
	return func(field string) (string, bool, bool) { return addressField(a, field) }
}

// listAddresses is addresses.list of one region, ordered by name.
func (s *Server) listAddresses(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	region := s.region(w, r)
	if region == "" {
		return
	}
	lq, ok := readListQuery(w, r, addressGetter(nil))
	if !ok {
		return
	}
	var matched []*computepb.Address
	for _, a := range p.sortedAddresses() {
		if a.region == region && lq.filter.match(addressGetter(a.pb)) {
			matched = append(matched, a.pb)
		}
	}
	resp := &computepb.AddressList{
		Kind:     proto.String("compute#addressList"),
		Id:       proto.String("projects/" + p.id + "/regions/" + region + "/addresses"),
		SelfLink: proto.String(link("projects", p.id, "regions", region, "addresses")),
	}
	resp.Items, resp.NextPageToken = onPage(lq, matched)
	writeProto(w, resp)
}

// aggregatedAddresses is addresses.aggregatedList, paged as instances'
// aggregated list: every region of the catalogue, and "global" (global
// addresses live there; the fake has none), is a key on every page, with
// its addresses on that page or a warning NO_RESULTS_ON_PAGE.
func (s *Server) aggregatedAddresses(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	lq, ok := readListQuery(w, r, addressGetter(nil))
	if !ok {
		return
	}
	var matched []*address
	for _, a := range p.sortedAddresses() {
		if lq.filter.match(addressGetter(a.pb)) {
			matched = append(matched, a)
		}
	}
	page, next := onPage(lq, matched)
	byScope := map[string][]*computepb.Address{}
	for _, a := range page {
		byScope["regions/"+a.region] = append(byScope["regions/"+a.region], a.pb)
	}
	resp := &computepb.AddressAggregatedList{
		Kind:          proto.String("compute#addressAggregatedList"),
		Id:            proto.String("projects/" + p.id + "/aggregated/addresses"),
		SelfLink:      proto.String(link("projects", p.id, "aggregated/addresses")),
		Items:         map[string]*computepb.AddressesScopedList{},
		NextPageToken: next,
	}
	scopes := []string{"global"}
	for _, rg := range s.ix.regions {
		scopes = append(scopes, "regions/"+rg)
	}
	for _, scope := range scopes {
		if as := byScope[scope]; len(as) > 0 {
			resp.Items[scope] = &computepb.AddressesScopedList{Addresses: as}
			continue
		}
		resp.Items[scope] = &computepb.AddressesScopedList{Warning: noResultsOnPage(scope)}
	}
	writeProto(w, resp)
}

// ---- seeding and inspection, for tests ----

// PutAddress reserves an address as if long ago (validated and filled in
// like an insert, RESERVED at once, or IN_USE when it promotes an
// instance's ephemeral IP). The STATIC_ADDRESSES quota is not checked.
func (s *Server) PutAddress(project, region string, body *computepb.Address) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projects[project]
	if p == nil {
		return NotFound("projects/" + project)
	}
	if _, ok := s.ix.cat.Regions[region]; !ok {
		return unknownRegion(region)
	}
	c := proto.Clone(body).(*computepb.Address)
	req, e := s.validateAddress(p, region, c)
	if e != nil {
		return e
	}
	if p.addresses[region+"/"+c.GetName()] != nil {
		return AlreadyExists(addrResource(p, region, c.GetName()))
	}
	if req.taken {
		return fmt.Errorf("IP '%s' is already being used by another resource", req.ip)
	}
	external := c.GetAddressType() == "EXTERNAL"
	ip := req.ip
	switch {
	case ip != "":
	case external:
		ip = s.allocExternal()
	default:
		ip = s.allocInternal(p)
	}
	if ip == "" {
		return fmt.Errorf("no free address left in the fake's range")
	}
	if external {
		s.external[ip] = true
	} else {
		p.internal[ip] = true
	}
	a := s.newAddress(p, region, c, ip, s.nextID())
	if req.holder != nil {
		s.promote(a, req.holder)
	}
	return nil
}

// Address returns a copy of the address as a GET would answer it (without
// advancing anything), or nil.
func (s *Server) Address(project, region, name string) *computepb.Address {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.projects[project]; p != nil {
		if a := p.addresses[region+"/"+name]; a != nil {
			return proto.Clone(a.pb).(*computepb.Address)
		}
	}
	return nil
}

// Addresses returns copies of every address of project, by region and name.
func (s *Server) Addresses(project string) []*computepb.Address {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*computepb.Address
	if p := s.projects[project]; p != nil {
		for _, a := range p.sortedAddresses() {
			out = append(out, proto.Clone(a.pb).(*computepb.Address))
		}
	}
	return out
}
