package fakecompute

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// maxPageSize is the API's cap and default for maxResults (500).
const maxPageSize = 500

// paging reads maxResults and pageToken. The page token is opaque to
// clients; here it is the offset into the filtered, ordered result.
func paging(q url.Values) (offset, size int, e *APIError) {
	size = maxPageSize
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, 0, Invalid("maxResults", v, "Must be an unsigned integer.") // fake's own reason
		}
		if n > maxPageSize {
			return 0, 0, Invalid("maxResults", v, "Must be less than or equal to 500") // fake's own reason
		}
		if n > 0 {
			size = int(n)
		}
	}
	if tok := q.Get("pageToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		rest, found := strings.CutPrefix(string(b), "fakecompute:")
		n, err2 := strconv.Atoi(rest)
		if err != nil || !found || err2 != nil || n < 0 {
			return 0, 0, Invalid("pageToken", tok, "Invalid page token.") // fake's own reason
		}
		offset = n
	}
	return offset, size, nil
}

func pageToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("fakecompute:%d", offset)))
}

// instanceField reads a filterable field of an instance (nil: only says
// which fields exist).
func instanceField(in *computepb.Instance, field string) (string, bool, bool) {
	if k, ok := strings.CutPrefix(field, "labels."); ok {
		v, set := in.GetLabels()[k]
		return v, set, true
	}
	var v string
	switch field {
	case "name":
		v = in.GetName()
	case "status":
		v = in.GetStatus()
	case "zone":
		v = in.GetZone()
	case "machineType":
		v = in.GetMachineType()
	case "id":
		if in.Id != nil {
			v = strconv.FormatUint(in.GetId(), 10)
		}
	case "description":
		v = in.GetDescription()
	case "creationTimestamp":
		v = in.GetCreationTimestamp()
	case "selfLink":
		v = in.GetSelfLink()
	case "labelFingerprint":
		v = in.GetLabelFingerprint()
	case "cpuPlatform":
		v = in.GetCpuPlatform()
	default:
		return "", false, false
	}
	return v, v != "", true
}

func instanceGetter(in *computepb.Instance) fieldGetter {
	return func(field string) (string, bool, bool) { return instanceField(in, field) }
}

// listQuery is what every list call asks for: a filter and a page.
type listQuery struct {
	filter       *filter
	offset, size int
}

// readListQuery parses the request's filter, checks its fields against a
// resource kind (probe), then reads its page; false after answering 400.
func readListQuery(w http.ResponseWriter, r *http.Request, probe fieldGetter) (listQuery, bool) {
	q := r.URL.Query()
	f, e := parseFilter(q.Get("filter"))
	if e == nil && !f.check(probe) {
		e = invalidFilter(q.Get("filter"))
	}
	var lq listQuery
	if e == nil {
		lq.offset, lq.size, e = paging(q)
	}
	if e != nil {
		writeAPIError(w, e)
		return listQuery{}, false
	}
	lq.filter = f
	return lq, true
}

// onPage is the part of matched the query's page shows, and the next
// page's token (nil on the last page).
func onPage[T any](lq listQuery, matched []T) ([]T, *string) {
	end := min(lq.offset+lq.size, len(matched))
	var items []T
	if lq.offset < len(matched) {
		items = matched[lq.offset:end]
	}
	var next *string
	if end < len(matched) {
		next = proto.String(pageToken(end))
	}
	return items, next
}

func warning(code, message, scope string) *computepb.Warning {
	return &computepb.Warning{Code: proto.String(code), Message: proto.String(message),
		Data: []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(scope)}}}
}

// noResultsOnPage is an aggregated list's warning for a scope with nothing
// on this page.
func noResultsOnPage(scope string) *computepb.Warning {
	return warning("NO_RESULTS_ON_PAGE", fmt.Sprintf("There are no results for scope '%s' on this page.", scope), scope)
}

// aggregatedInstances is instances.aggregatedList: every zone of the
// catalogue is a key on every page, with its instances on that page, or a
// warning NO_RESULTS_ON_PAGE ("There are no results for scope 'zones/x' on
// this page." with data scope, as in many public fixtures of real answers),
// or, for an unreachable zone, a warning UNREACHABLE (the code's
// description, "A given scope cannot be reached.", from the API's Warning
// enum; the message text is the fake's own) and none of its instances. With
// returnPartialSuccess=true the unreachable scopes are also listed in
// "unreachables".
func (s *Server) aggregatedInstances(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	lq, ok := readListQuery(w, r, instanceGetter(nil))
	if !ok {
		return
	}
	var matched []*instance
	for _, in := range p.sortedInstances() {
		if !s.knobs.unreachable[in.zone] && lq.filter.match(instanceGetter(in.pb)) {
			matched = append(matched, in)
		}
	}
	page, next := onPage(lq, matched)
	byZone := map[string][]*computepb.Instance{}
	for _, in := range page {
		byZone[in.zone] = append(byZone[in.zone], in.pb)
	}
	resp := &computepb.InstanceAggregatedList{
		Kind:          proto.String("compute#instanceAggregatedList"),
		Id:            proto.String("projects/" + p.id + "/aggregated/instances"),
		SelfLink:      proto.String(link("projects", p.id, "aggregated/instances")),
		Items:         map[string]*computepb.InstancesScopedList{},
		NextPageToken: next,
	}
	partial := r.URL.Query().Get("returnPartialSuccess") == "true"
	for _, z := range s.ix.zones {
		scope := "zones/" + z
		switch {
		case s.knobs.unreachable[z]:
			resp.Items[scope] = &computepb.InstancesScopedList{Warning: warning("UNREACHABLE",
				fmt.Sprintf("Scope '%s' cannot be reached.", scope), scope)}
			if partial {
				resp.Unreachables = append(resp.Unreachables, scope)
			}
		case len(byZone[z]) > 0:
			resp.Items[scope] = &computepb.InstancesScopedList{Instances: byZone[z]}
		default:
			resp.Items[scope] = &computepb.InstancesScopedList{Warning: noResultsOnPage(scope)}
		}
	}
	writeProto(w, resp)
}

// listInstances is instances.list of one zone; an unreachable zone answers
// 503 backendError.
func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	zone := s.zone(w, r)
	if zone == "" {
		return
	}
	if s.knobs.unreachable[zone] {
		writeAPIError(w, BackendError())
		return
	}
	lq, ok := readListQuery(w, r, instanceGetter(nil))
	if !ok {
		return
	}
	var matched []*computepb.Instance
	for _, in := range p.sortedInstances() {
		if in.zone == zone && lq.filter.match(instanceGetter(in.pb)) {
			matched = append(matched, in.pb)
		}
	}
	resp := &computepb.InstanceList{
		Kind:     proto.String("compute#instanceList"),
		Id:       proto.String("projects/" + p.id + "/zones/" + zone + "/instances"),
		SelfLink: proto.String(link("projects", p.id, "zones", zone, "instances")),
	}
	resp.Items, resp.NextPageToken = onPage(lq, matched)
	writeProto(w, resp)
}
