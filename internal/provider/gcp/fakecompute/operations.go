package fakecompute

import (
	"fmt"
	"net/http"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// operation is one zonal, regional or global operation. It runs for a number of polls
// (knobs.opPolls when it starts); each poll of it, each GET of its target
// (knobs.advanceOnGet) and each Advance step counts one. At the last it is
// DONE, and its effect (done) or its failure (failed) applies.
type operation struct {
	pb         *computepb.Operation
	seq        uint64
	project    string
	scope      string // "zones/<z>", "regions/<r>" or "global"
	target     string // "zones/<z>/instances/<n>", "regions/<r>/addresses/<n>" or "global/firewalls/<n>"
	remaining  int
	errs       *computepb.Error
	httpStatus *int32
	httpMsg    *string

	step   func() // after a poll that leaves it RUNNING
	done   func() // at DONE, without error
	failed func() // at DONE, with error

	inst      *instance    // the instance this operation is busy with
	fw        *firewall    // the rule this operation is busy with
	addr      *address     // the address this operation is busy with
	followers []*operation // repeated deletes, DONE with this one
	leader    *operation   // for a follower: the operation it ends with
}

// newOp makes a RUNNING operation; the caller sets its callbacks and calls
// startOp.
func (s *Server) newOp(p *projectState, scope, opType, target string, targetID uint64) *operation {
	s.seq++
	seq := s.seq
	now := s.now()
	// The API's names: operation-<ms since epoch>-<13 hex>-<8 hex>-<8 hex>
	// ("operation-1538578207537-577542784f769-7999ab71-94f9ec1d").
	name := fmt.Sprintf("operation-%d-%013x-%08x-%08x", now.UnixMilli(), now.UnixMicro()&0xfffffffffffff,
		uint32(seq*2654435761), uint32(seq*40503+7))
	pb := &computepb.Operation{
		Kind:          proto.String("compute#operation"),
		Id:            proto.Uint64(s.nextID()),
		Name:          proto.String(name),
		OperationType: proto.String(opType),
		TargetLink:    proto.String(link("projects", p.id, target)),
		Status:        computepb.Operation_RUNNING.Enum(),
		User:          proto.String("egress-operator@" + p.id + ".iam.gserviceaccount.com"),
		Progress:      proto.Int32(0),
		InsertTime:    proto.String(s.timestamp()),
		StartTime:     proto.String(s.timestamp()),
		SelfLink:      proto.String(link("projects", p.id, scope, "operations", name)),
	}
	if targetID != 0 {
		pb.TargetId = proto.Uint64(targetID)
	}
	switch {
	case strings.HasPrefix(scope, "zones/"):
		pb.Zone = proto.String(link("projects", p.id, scope))
	case strings.HasPrefix(scope, "regions/"):
		pb.Region = proto.String(link("projects", p.id, scope))
	}
	return &operation{pb: pb, seq: seq, project: p.id, scope: scope, target: target, remaining: s.knobs.opPolls}
}

// fail makes op end with e, rendered for c.
func (op *operation) fail(e *AsyncError, c opContext) {
	op.errs, op.httpStatus, op.httpMsg = e.render(c)
}

func opKey(project, scope, name string) string { return project + "/" + scope + "/" + name }

// startOp registers op; an operation of no polls is DONE at once.
func (s *Server) startOp(op *operation) {
	s.ops[opKey(op.project, op.scope, op.pb.GetName())] = op
	if op.inst != nil {
		op.inst.op = op
	}
	if op.fw != nil {
		op.fw.op = op
	}
	if op.addr != nil {
		op.addr.op = op
	}
	if op.remaining <= 0 {
		s.finishOp(op)
		return
	}
	s.inflight = append(s.inflight, op)
}

// advanceOp counts one poll.
func (s *Server) advanceOp(op *operation) {
	if op.pb.GetStatus() == computepb.Operation_DONE {
		return
	}
	if op.leader != nil {
		s.advanceOp(op.leader)
		return
	}
	op.remaining--
	if op.remaining <= 0 {
		s.finishOp(op)
		return
	}
	if op.step != nil {
		op.step()
	}
}

func (s *Server) finishOp(op *operation) {
	for i, o := range s.inflight {
		if o == op {
			s.inflight = append(s.inflight[:i:i], s.inflight[i+1:]...)
			break
		}
	}
	op.pb.Status = computepb.Operation_DONE.Enum()
	op.pb.Progress = proto.Int32(100)
	op.pb.EndTime = proto.String(s.timestamp())
	if op.inst != nil && op.inst.op == op {
		op.inst.op = nil
	}
	if op.fw != nil && op.fw.op == op {
		op.fw.op = nil
	}
	if op.addr != nil && op.addr.op == op {
		op.addr.op = nil
	}
	if op.errs != nil {
		op.pb.Error = op.errs
		op.pb.HttpErrorStatusCode = op.httpStatus
		op.pb.HttpErrorMessage = op.httpMsg
		if op.failed != nil {
			op.failed()
		}
	} else if op.done != nil {
		op.done()
	}
	for _, f := range op.followers {
		s.finishOp(f)
	}
}

// notReady answers 400 resourceNotReady while op runs on resource (a
// resource takes one operation at a time); false when op is nil.
func notReady(w http.ResponseWriter, op *operation, resource string) bool {
	if op == nil {
		return false
	}
	writeAPIError(w, ResourceNotReady(resource))
	return true
}

// touch counts one poll for every operation running on target (a GET of
// it), when knobs.advanceOnGet.
func (s *Server) touch(p *projectState, target string) {
	if !s.knobs.advanceOnGet {
		return
	}
	for _, op := range append([]*operation(nil), s.inflight...) {
		if op.project == p.id && op.target == target {
			s.advanceOp(op)
		}
	}
}

func opScope(r *http.Request) string {
	if z := r.PathValue("zone"); z != "" {
		return "zones/" + z
	}
	if rg := r.PathValue("region"); rg != "" {
		return "regions/" + rg
	}
	return "global"
}

func (s *Server) findOp(w http.ResponseWriter, r *http.Request) *operation {
	p := s.project(w, r)
	if p == nil {
		return nil
	}
	scope := opScope(r)
	switch {
	case strings.HasPrefix(scope, "zones/") && s.zone(w, r) == "":
		return nil
	case strings.HasPrefix(scope, "regions/") && s.region(w, r) == "":
		return nil
	}
	op := s.ops[opKey(p.id, scope, r.PathValue("op"))]
	if op == nil {
		writeAPIError(w, NotFound(fmt.Sprintf("projects/%s/%s/operations/%s", p.id, scope, r.PathValue("op"))))
	}
	return op
}

// getOperation is zoneOperations.get, regionOperations.get and
// globalOperations.get: one poll,
// then the operation as it is.
func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) {
	if op := s.findOp(w, r); op != nil {
		s.advanceOp(op)
		writeProto(w, op.pb)
	}
}

// waitOperation is zoneOperations.wait, regionOperations.wait and
// globalOperations.wait: knobs.waitPolls
// polls (0: until DONE), then the operation as it is.
func (s *Server) waitOperation(w http.ResponseWriter, r *http.Request) {
	op := s.findOp(w, r)
	if op == nil {
		return
	}
	for n := 0; op.pb.GetStatus() != computepb.Operation_DONE && (s.knobs.waitPolls == 0 || n < s.knobs.waitPolls); n++ {
		s.advanceOp(op)
	}
	writeProto(w, op.pb)
}
