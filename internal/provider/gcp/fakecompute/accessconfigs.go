package fakecompute

import (
	"fmt"
	"net/http"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// instances.addAccessConfig and instances.deleteAccessConfig: the external
// address of an instance's network interface, changed in place (zone
// operations). The fake models access configs on nic0 only, at most one (as
// GCE allows). An address named by natIP is claimed when the call is
// accepted (IN_USE, users naming the instance), so no other call can take it
// meanwhile; the access config appears on, or goes from, the instance when
// the operation is DONE, and only then does an address deleteAccessConfig
// releases turn RESERVED.

// accessConfigNIC checks the networkInterface parameter; nil after
// answering.
func accessConfigNIC(w http.ResponseWriter, r *http.Request, in *instance) *computepb.NetworkInterface {
	name := r.URL.Query().Get("networkInterface")
	if name == "" {
		// Fake's own: a required query parameter left out, in the
		// required-field frame.
		writeAPIError(w, Required("networkInterface"))
		return nil
	}
	n := nic0(in)
	if n == nil || name != n.GetName() {
		writeAPIError(w, badNetworkInterface(name))
		return nil
	}
	return n
}

// accessConfigInstance is the named instance and the network interface
// the call names, with no operation running on it; nils after answering.
func (s *Server) accessConfigInstance(w http.ResponseWriter, r *http.Request, p *projectState, zone, name string) (*instance, *computepb.NetworkInterface) {
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return nil, nil
	}
	n := accessConfigNIC(w, r, in)
	if n == nil || s.busy(w, p, in) {
		return nil, nil
	}
	return in, n
}

// addAccessConfig is instances.addAccessConfig (body: an AccessConfig).
func (s *Server) addAccessConfig(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	var ac computepb.AccessConfig
	if e := readProto(r, &ac); e != nil {
		writeAPIError(w, e)
		return
	}
	in, n := s.accessConfigInstance(w, r, p, zone, name)
	if n == nil {
		return
	}
	if len(n.GetAccessConfigs()) > 0 {
		writeAPIError(w, atMostOneAccessConfig())
		return
	}
	if t := ac.GetType(); t != "" && t != "ONE_TO_ONE_NAT" {
		writeAPIError(w, Invalid("resource.type", t, "Must be ONE_TO_ONE_NAT.")) // fake's own reason
		return
	}
	var a *address
	if ip := ac.GetNatIP(); ip != "" {
		if a = p.addressByIP(in.region, "EXTERNAL", ip); a == nil {
			writeAPIError(w, natIPNotFound("resource.natIP", ip, in.region))
			return
		}
	}
	op := s.newOp(p, "zones/"+zone, "addAccessConfig", in.target(), in.pb.GetId())
	op.inst = in
	c := instOpContext(p, in)
	switch {
	case a != nil && a.user != nil:
		op.fail(IPInUseByAnotherResource(a.pb.GetAddress()), c)
	default:
		if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
			s.failWithFault(op, f.Async, c)
			break
		}
		if a != nil {
			in.natAddr = a
			a.bind(in)
		}
		op.done = func() {
			cfg := &computepb.AccessConfig{Kind: proto.String("compute#accessConfig"), Type: proto.String("ONE_TO_ONE_NAT"),
				Name: ac.Name, NetworkTier: ac.NetworkTier}
			if cfg.GetName() == "" {
				cfg.Name = proto.String("External NAT")
			}
			if cfg.GetNetworkTier() == "" {
				cfg.NetworkTier = proto.String("PREMIUM")
			}
			if a != nil {
				cfg.NatIP, cfg.NetworkTier = proto.String(a.pb.GetAddress()), proto.String(a.pb.GetNetworkTier())
			}
			n.AccessConfigs = []*computepb.AccessConfig{cfg}
			in.external = true
			if in.status() == "RUNNING" || in.status() == "SUSPENDED" || a != nil {
				s.assignExternal(in) // an ephemeral address only while the instance runs
			}
		}
	}
	s.answerOp(w, r, p, op)
}

// deleteAccessConfig is instances.deleteAccessConfig (accessConfig and
// networkInterface name it): an ephemeral address goes back to the pool, a
// reserved one turns RESERVED, when the operation is DONE.
func (s *Server) deleteAccessConfig(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil || s.requestIDOp(w, r, p) {
		return
	}
	acName := r.URL.Query().Get("accessConfig")
	if acName == "" {
		writeAPIError(w, Required("accessConfig")) // fake's own, as networkInterface's
		return
	}
	in, n := s.accessConfigInstance(w, r, p, zone, name)
	if n == nil {
		return
	}
	if len(n.GetAccessConfigs()) == 0 || n.AccessConfigs[0].GetName() != acName {
		// Fake's own text in the API's invalid-value frame.
		writeAPIError(w, Invalid("accessConfig", acName,
			fmt.Sprintf("No access config named '%s' on network interface '%s'.", acName, n.GetName())))
		return
	}
	op := s.newOp(p, "zones/"+zone, "deleteAccessConfig", in.target(), in.pb.GetId())
	op.inst = in
	if f := s.takeFault(r.Method, r.URL.Path, true); f != nil {
		s.failWithFault(op, f.Async, instOpContext(p, in))
	} else {
		op.done = func() {
			if a := in.natAddr; a != nil {
				a.unbind(in)
				in.natAddr = nil
			} else {
				delete(s.external, n.AccessConfigs[0].GetNatIP())
			}
			n.AccessConfigs = nil
			in.external = false
			in.natPending = false
		}
	}
	s.answerOp(w, r, p, op)
}
