package fakecompute

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// firewall is one VPC firewall rule (global, by name).
type firewall struct {
	pb *computepb.Firewall
	op *operation
}

func fwTarget(name string) string { return "global/firewalls/" + name }

func fwResource(p *projectState, name string) string {
	return "projects/" + p.id + "/" + fwTarget(name)
}

var ipProtocols = map[string]bool{"tcp": true, "udp": true, "icmp": true, "esp": true, "ah": true,
	"sctp": true, "ipip": true, "all": true}

// validateFirewall checks a rule and fills in what the API fills in:
// network (default global/networks/default), direction INGRESS, priority
// 1000, and, for an INGRESS rule that names no source at all, sourceRanges
// 0.0.0.0/0: a rule "without sources" is open to every address
// (hashicorp/terraform-provider-google#6789, "Firewall source_ranges
// defaults to 0.0.0.0/0 when source_tags not provided (dangerous!)").
// EGRESS without destinationRanges likewise gets 0.0.0.0/0. The reasons
// after "Invalid value for field ..." are the fake's own.
func (s *Server) validateFirewall(p *projectState, fw *computepb.Firewall) *APIError {
	switch {
	case fw.GetName() == "":
		return Required("resource.name")
	case !nameRE.MatchString(fw.GetName()):
		return badName("resource.name", fw.GetName())
	}
	netRef := fw.GetNetwork()
	if netRef == "" {
		netRef = "global/networks/default"
	}
	npath, ok := resourcePath(p.id, netRef)
	nparts := strings.Split(npath, "/")
	if !ok || len(nparts) != 5 || nparts[2] != "global" || nparts[3] != "networks" {
		return Invalid("resource.network", netRef, "The URL is malformed.")
	}
	if nparts[1] != p.id || !s.ix.networks[nparts[4]] {
		return NotFound(npath)
	}
	fw.Network = proto.String(linkBase + npath)
	switch fw.GetDirection() {
	case "":
		fw.Direction = proto.String("INGRESS")
	case "INGRESS", "EGRESS":
	default:
		return Invalid("resource.direction", fw.GetDirection(), "Must be INGRESS or EGRESS.")
	}
	if fw.Priority == nil {
		fw.Priority = proto.Int32(1000)
	} else if fw.GetPriority() < 0 || fw.GetPriority() > 65535 {
		return Invalid("resource.priority", fmt.Sprint(fw.GetPriority()), "Must be between 0 and 65535.")
	}
	if (len(fw.GetAllowed()) == 0) == (len(fw.GetDenied()) == 0) {
		return Invalid("resource", "", "A firewall rule must specify exactly one of allowed and denied.")
	}
	type rule struct {
		proto string
		ports []string
	}
	var rules []rule
	field := "allowed"
	for _, a := range fw.GetAllowed() {
		rules = append(rules, rule{a.GetIPProtocol(), a.GetPorts()})
	}
	if len(fw.GetDenied()) > 0 {
		field = "denied"
		for _, d := range fw.GetDenied() {
			rules = append(rules, rule{d.GetIPProtocol(), d.GetPorts()})
		}
	}
	for i, ru := range rules {
		f := fmt.Sprintf("resource.%s[%d].IPProtocol", field, i)
		if ru.proto == "" {
			return Required(f)
		}
		if n, err := strconv.Atoi(ru.proto); !ipProtocols[ru.proto] && (err != nil || n < 0 || n > 255) {
			return Invalid(f, ru.proto, "Must be a protocol name or number.")
		}
		for j, port := range ru.ports {
			pf := fmt.Sprintf("resource.%s[%d].ports[%d]", field, i, j)
			if ru.proto != "tcp" && ru.proto != "udp" && ru.proto != "sctp" {
				return Invalid(pf, port, "Ports may only be specified for tcp, udp and sctp.")
			}
			if !validPortRange(port) {
				return Invalid(pf, port, "Must be a port or a port range between 0 and 65535.")
			}
		}
	}
	for i, cidr := range fw.GetSourceRanges() {
		if !validRange(cidr) {
			// After the text of a gcloud simulator (fake's own otherwise).
			return Invalid(fmt.Sprintf("resource.sourceRanges[%d]", i), cidr, "Must be a CIDR address range.")
		}
	}
	for i, cidr := range fw.GetDestinationRanges() {
		if !validRange(cidr) {
			return Invalid(fmt.Sprintf("resource.destinationRanges[%d]", i), cidr, "Must be a CIDR address range.")
		}
	}
	for i, t := range fw.GetTargetTags() {
		if !nameRE.MatchString(t) {
			return badName(fmt.Sprintf("resource.targetTags[%d]", i), t)
		}
	}
	for i, t := range fw.GetSourceTags() {
		if !nameRE.MatchString(t) {
			return badName(fmt.Sprintf("resource.sourceTags[%d]", i), t)
		}
	}
	if fw.GetDirection() == "INGRESS" && len(fw.GetSourceRanges()) == 0 && len(fw.GetSourceTags()) == 0 &&
		len(fw.GetSourceServiceAccounts()) == 0 {
		fw.SourceRanges = []string{"0.0.0.0/0"}
	}
	if fw.GetDirection() == "EGRESS" && len(fw.GetDestinationRanges()) == 0 {
		fw.DestinationRanges = []string{"0.0.0.0/0"}
	}
	if fw.Disabled == nil {
		fw.Disabled = proto.Bool(false)
	}
	if fw.LogConfig == nil {
		fw.LogConfig = &computepb.FirewallLogConfig{Enable: proto.Bool(false)}
	}
	return nil
}

func validRange(s string) bool {
	if _, _, err := net.ParseCIDR(s); err == nil {
		return true
	}
	return net.ParseIP(s) != nil
}

func validPortRange(s string) bool {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.Atoi(lo)
	if err != nil || a < 0 || a > 65535 {
		return false
	}
	if !isRange {
		return true
	}
	b, err := strconv.Atoi(hi)
	return err == nil && b >= a && b <= 65535
}

func (s *Server) projectLimit(metric string) float64 {
	if l, ok := s.knobs.projectQuota[metric]; ok {
		return l
	}
	return defaultProjectQuota[metric]
}

// insertFirewall is firewalls.insert: the rule exists at once (a GET finds
// it while its operation runs); a duplicate name is 409 alreadyExists.
func (s *Server) insertFirewall(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	var fw computepb.Firewall
	if e := readProto(r, &fw); e != nil {
		writeAPIError(w, e)
		return
	}
	if e := s.validateFirewall(p, &fw); e != nil {
		writeAPIError(w, e)
		return
	}
	name := fw.GetName()
	if p.firewalls[name] != nil {
		writeAPIError(w, AlreadyExists(fwResource(p, name)))
		return
	}
	if l := s.projectLimit("FIREWALLS"); float64(len(p.firewalls))+1 > l {
		// The global form, "Quota 'INSTANCE_TEMPLATES' exceeded.  Limit: 300.0
		// globally." (ZcashFoundation/zebra#2090).
		writeAPIError(w, &APIError{Code: http.StatusForbidden, Reason: "quotaExceeded", Domain: "global",
			Message: fmt.Sprintf("Quota 'FIREWALLS' exceeded.  Limit: %.1f globally.", l)})
		return
	}
	id := s.nextID()
	op := s.newOp(p, "global", "insert", fwTarget(name), id)
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		op.fail(f.Async, opContext{project: p.id})
	} else {
		fw.Kind = proto.String("compute#firewall")
		fw.Id = proto.Uint64(id)
		fw.CreationTimestamp = proto.String(s.timestamp())
		fw.SelfLink = proto.String(link("projects", p.id, fwTarget(name)))
		rule := &firewall{pb: &fw}
		p.firewalls[name] = rule
		op.fw = rule
	}
	s.answerOp(w, r, p, op)
}

func (s *Server) findFirewall(w http.ResponseWriter, r *http.Request) (*projectState, *firewall) {
	p := s.project(w, r)
	if p == nil {
		return nil, nil
	}
	fw := p.firewalls[r.PathValue("name")]
	if fw == nil {
		writeAPIError(w, NotFound(fwResource(p, r.PathValue("name"))))
	}
	return p, fw
}

// idleFirewall is the request's rule when no operation runs on it, or nil
// after answering (404, or 400 resourceNotReady), as a change needs.
func (s *Server) idleFirewall(w http.ResponseWriter, r *http.Request) (*projectState, *firewall) {
	p, fw := s.findFirewall(w, r)
	if fw == nil || notReady(w, fw.op, fwResource(p, fw.pb.GetName())) {
		return p, nil
	}
	return p, fw
}

// getFirewall is firewalls.get; like an instance GET it counts one poll
// for the operations running on the rule.
func (s *Server) getFirewall(w http.ResponseWriter, r *http.Request) {
	if p, fw := s.findFirewall(w, r); fw != nil {
		s.answerGet(w, p, fw.pb, fwTarget(fw.pb.GetName()))
	}
}

// patchFirewall is firewalls.patch: the top-level fields the body has
// replace the rule's (lists whole), the others stay. The change applies at
// once.
func (s *Server) patchFirewall(w http.ResponseWriter, r *http.Request) {
	s.changeFirewall(w, r, "patch")
}

// updateFirewall is firewalls.update (PUT): the body replaces the rule.
func (s *Server) updateFirewall(w http.ResponseWriter, r *http.Request) {
	s.changeFirewall(w, r, "update")
}

func (s *Server) changeFirewall(w http.ResponseWriter, r *http.Request, opType string) {
	if s.answeredEarly(w, r) {
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var patch computepb.Firewall
	if e := readProto(r, &patch); e != nil {
		writeAPIError(w, e)
		return
	}
	p, fw := s.idleFirewall(w, r)
	if fw == nil {
		return
	}
	name := fw.pb.GetName()
	if patch.Name != nil && patch.GetName() != name {
		writeAPIError(w, Invalid("resource.name", patch.GetName(), "The name of a firewall rule cannot change.")) // fake's own
		return
	}
	var next *computepb.Firewall
	if opType == "update" {
		next = &patch
		next.Name = proto.String(name)
	} else {
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(body, &keys)
		next = proto.Clone(fw.pb).(*computepb.Firewall)
		// What the API filled in at insert (0.0.0.0/0 for a rule without
		// sources) is stored and stays unless the patch replaces it.
		mergePresent(next, &patch, keys)
	}
	if e := s.validateFirewall(p, next); e != nil {
		writeAPIError(w, e)
		return
	}
	op := s.newOp(p, "global", opType, fwTarget(name), fw.pb.GetId())
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		op.fail(f.Async, opContext{project: p.id})
	} else {
		next.Kind, next.Id = fw.pb.Kind, fw.pb.Id
		next.CreationTimestamp, next.SelfLink = fw.pb.CreationTimestamp, fw.pb.SelfLink
		fw.pb = next
	}
	s.answerOp(w, r, p, op)
}

// mergePresent copies into dst the top-level fields of src whose JSON
// names are keys of the patch body (clearing those src does not set).
func mergePresent(dst, src proto.Message, keys map[string]json.RawMessage) {
	dm, sm := dst.ProtoReflect(), src.ProtoReflect()
	fields := dm.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		_, byJSON := keys[fd.JSONName()]
		_, byName := keys[string(fd.Name())]
		if !byJSON && !byName {
			continue
		}
		if sm.Has(fd) {
			dm.Set(fd, sm.Get(fd))
		} else {
			dm.Clear(fd)
		}
	}
}

// deleteFirewall is firewalls.delete: the rule is gone when the operation
// is DONE.
func (s *Server) deleteFirewall(w http.ResponseWriter, r *http.Request) {
	if s.answeredEarly(w, r) {
		return
	}
	p, fw := s.idleFirewall(w, r)
	if fw == nil {
		return
	}
	name := fw.pb.GetName()
	op := s.newOp(p, "global", "delete", fwTarget(name), fw.pb.GetId())
	op.fw = fw
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		op.fail(f.Async, opContext{project: p.id})
	} else {
		op.done = func() { delete(p.firewalls, name) }
	}
	s.answerOp(w, r, p, op)
}

func firewallField(fw *computepb.Firewall, field string) (string, bool, bool) {
	var v string
	switch field {
	case "name":
		v = fw.GetName()
	case "description":
		v = fw.GetDescription()
	case "network":
		v = fw.GetNetwork()
	case "direction":
		v = fw.GetDirection()
	case "priority":
		if fw.Priority != nil {
			v = fmt.Sprint(fw.GetPriority())
		}
	case "disabled":
		if fw.Disabled != nil {
			v = fmt.Sprint(fw.GetDisabled())
		}
	case "id":
		if fw.Id != nil {
			v = fmt.Sprint(fw.GetId())
		}
	case "selfLink":
		v = fw.GetSelfLink()
	case "creationTimestamp":
		v = fw.GetCreationTimestamp()
	default:
		return "", false, false
	}
	return v, v != "", true
}

// listFirewalls is firewalls.list, ordered by name.
func (s *Server) listFirewalls(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	lq, ok := readListQuery(w, r, func(field string) (string, bool, bool) { return firewallField(nil, field) })
	if !ok {
		return
	}
	names := make([]string, 0, len(p.firewalls))
	for n := range p.firewalls {
		names = append(names, n)
	}
	sort.Strings(names)
	var matched []*computepb.Firewall
	for _, n := range names {
		fw := p.firewalls[n].pb
		if lq.filter.match(func(field string) (string, bool, bool) { return firewallField(fw, field) }) {
			matched = append(matched, fw)
		}
	}
	resp := &computepb.FirewallList{
		Kind:     proto.String("compute#firewallList"),
		Id:       proto.String("projects/" + p.id + "/global/firewalls"),
		SelfLink: proto.String(link("projects", p.id, "global/firewalls")),
	}
	resp.Items, resp.NextPageToken = onPage(lq, matched)
	writeProto(w, resp)
}

// PutFirewall adds a rule as if created long ago (validated and filled in
// like an insert).
func (s *Server) PutFirewall(project string, fw *computepb.Firewall) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.projects[project]
	if p == nil {
		return NotFound("projects/" + project)
	}
	c := proto.Clone(fw).(*computepb.Firewall)
	if e := s.validateFirewall(p, c); e != nil {
		return e
	}
	if p.firewalls[c.GetName()] != nil {
		return AlreadyExists(fwResource(p, c.GetName()))
	}
	c.Kind = proto.String("compute#firewall")
	c.Id = proto.Uint64(s.nextID())
	c.CreationTimestamp = proto.String(s.timestamp())
	c.SelfLink = proto.String(link("projects", p.id, fwTarget(c.GetName())))
	p.firewalls[c.GetName()] = &firewall{pb: c}
	return nil
}
