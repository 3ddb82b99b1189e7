package controller

import (
	"slices"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
)

// The replacement state machine. A Proxy's status records up to three kinds
// of backend instance:
//
//   - current (status.providerID, status.instanceName): the instance the
//     Proxy converges to, the one its spec asks for now;
//   - retiring (status.retiringProviderID, status.retiringInstanceName): the
//     instance that serves at status.endpoint while current provisions;
//   - superseded (status.supersededProviderIDs): instances nobody wants any
//     more; they never serve and are deleted until the backend says gone.
//
// Two rules follow, and every transition below keeps them:
//
//  1. The instance at status.endpoint is deleted only after its successor
//     runs: it moves to superseded only in cutover.
//  2. Every instance the reconciler made is recorded in one of the three
//     places before the next Create, so at most one unrecorded instance can
//     exist (the one whose Create result a crash kept from the status).
//
// The functions are pure, so the table tests in proxy_replace_test.go can
// walk every ordering of spec changes, provider errors and crashes.

// record is the instance-bookkeeping part of a Proxy's status.
type record struct {
	current, currentName   string
	retiring, retiringName string
	superseded             []string
	// serving: status.endpoint is set, so an instance serves there: the
	// retiring one when set, else current.
	serving bool
}

func recordOf(st *egressv1.ProxyStatus) record {
	return record{
		current: st.ProviderID, currentName: st.InstanceName,
		retiring: st.RetiringProviderID, retiringName: st.RetiringInstanceName,
		superseded: slices.Clone(st.SupersededProviderIDs),
		serving:    st.Endpoint != "",
	}
}

// store writes r back into st. It clears the endpoint when nothing serves;
// setting it is the caller's, since only an observed Running instance may.
func (r record) store(st *egressv1.ProxyStatus) {
	st.ProviderID, st.InstanceName = r.current, r.currentName
	st.RetiringProviderID, st.RetiringInstanceName = r.retiring, r.retiringName
	st.SupersededProviderIDs = r.superseded
	if !r.serving {
		st.Endpoint, st.IP = "", ""
	}
}

// servingID is the ID of the instance at status.endpoint, or "".
func (r record) servingID() string {
	switch {
	case !r.serving:
		return ""
	case r.retiring != "":
		return r.retiring
	default:
		return r.current
	}
}

// reshape plans for the instance name the spec derives now. When it differs
// from current's, the serving instance becomes (or stays) retiring, a
// current that never served is superseded, and current is emptied so the
// caller creates the new one; when it equals the retiring instance's name
// (a spec reverted during a replacement), the retiring instance becomes
// current again and the replacement is superseded.
func reshape(r record, desired string) record {
	switch {
	case r.current != "" && r.currentName == desired:
		return r
	case r.retiring != "" && r.retiringName == desired:
		r.superseded = supersede(r.superseded, r.current)
		r.current, r.currentName = r.retiring, r.retiringName
		r.retiring, r.retiringName = "", ""
		return r
	case r.current == "":
		// Nothing recorded to move: a lost current or a failed create. A
		// retiring instance keeps serving.
		return r
	case r.retiring == "" && r.serving:
		r.retiring, r.retiringName = r.current, r.currentName
	default:
		// current never served: a replacement overtaken by another change,
		// or a first instance still provisioning.
		r.superseded = supersede(r.superseded, r.current)
	}
	r.current, r.currentName = "", ""
	return r
}

// cutover records that current runs and serves: the instance it replaced is
// superseded now, and only now.
func cutover(r record) record {
	r.superseded = supersede(r.superseded, r.retiring)
	r.retiring, r.retiringName = "", ""
	r.serving = true
	return r
}

// lost records that current is gone from the backend: it is dropped so that
// the caller creates it again. A retiring instance still serves; without one
// nothing does.
func lost(r record) record {
	r.current, r.currentName = "", ""
	if r.retiring == "" {
		r.serving = false
	}
	return r
}

// release records that the retiring instance goes before its successor is
// made: it holds an address that no two instances may hold at once (its
// entry's pool address), so nothing serves until current runs.
func release(r record) record {
	r.superseded = supersede(r.superseded, r.retiring)
	r.retiring, r.retiringName = "", ""
	r.serving = false
	return r
}

// retiredGone records that the retiring instance vanished: nothing serves
// until current runs.
func retiredGone(r record) record {
	r.retiring, r.retiringName = "", ""
	r.serving = false
	return r
}

// gone drops a superseded instance the backend no longer has.
func gone(r record, id string) record {
	r.superseded = slices.DeleteFunc(r.superseded, func(s string) bool { return s == id })
	if len(r.superseded) == 0 {
		r.superseded = nil
	}
	return r
}

// supersede appends id unless it is empty or listed already.
func supersede(list []string, id string) []string {
	if id == "" || slices.Contains(list, id) {
		return list
	}
	return append(list, id)
}
