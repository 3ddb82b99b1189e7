package fakecompute

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Guest attributes: what a guest PUTs to its metadata server under
// instance/guest-attributes/<namespace>/<key>, read from outside with
// instances.getGuestAttributes (GET .../instances/{instance}/getGuestAttributes
// with queryPath or variableKey; response GuestAttributes, as the discovery
// document of compute v1 (google.golang.org/api/compute/v1/compute-api.json)
// describes them: kind, selfLink, queryPath, queryValue.items[{namespace,
// key, value}], variableKey, variableValue).
//
// What the fake takes from public sources:
//   - Guests can write only when the instance's metadata (or the project's,
//     which the fake does not model) has enable-guest-attributes set to
//     TRUE, compared without case: gcloud's own tests feed it "TruE" as
//     enabled and "false" at the instance as overriding the project's
//     (google-cloud-sdk, tests/unit/surface/compute/ssh guest attributes
//     tests); the attributes are off by default
//     (related-sciences/gce-github-runner#27, "Guest attributes are disabled
//     by default").
//   - A path with no value is answered 404: iap-desktop's
//     ComputeEngineClient.GetGuestAttributesAsync reads NotFound as "No
//     guest attributes present" (GoogleCloudPlatform/iap-desktop,
//     sources/Google.Solutions.Apis/Compute/ComputeEngineClient.cs). No
//     source quotes the message: the fake's is the API's notFound frame
//     ("The resource '<r>' was not found", NotFound) with the instance's
//     guestAttributes path and the query path as <r> (fake's own).
//   - selfLink is the instance's selfLink and "/guestAttributes/", as in
//     gcloud's test data for a hostkeys/ query.
//   - The query path is "" (every namespace), "<namespace>/" or
//     "<namespace>/<key>": gcloud's get-guest-attributes validates it with
//     ^([\w\-]+/[\w\-]*)?$ ("Must be empty or of the form `<namespace>/` or
//     `<namespace>/<key>`"). The API's answer to another form is not
//     quoted anywhere: the fake answers 400 invalid (fake's own text).
//   - variableKey is the legacy form (GoogleCloudPlatform/compute-image-tools#831:
//     "Don't use variableKey when requesting guest attributes, that was a
//     legacy option"); the fake reads it as "<namespace>/<key>" and answers
//     variableValue (fake's own reading).
//
// Not modelled: project metadata, what a stop or a reset does to the
// values (they go with the instance on delete), the metadata server's
// size and rate limits.

// guestQueryPath is the form gcloud accepts for a queryPath.
var guestQueryPath = regexp.MustCompile(`^([\w\-]+/[\w\-]*)?$`)

// ErrGuestAttributesDisabled is SetGuestAttribute's answer for an
// instance whose metadata does not enable guest attributes: the guest's
// PUT is refused, and nothing is stored.
var ErrGuestAttributesDisabled = errors.New("guest attributes are not enabled on this instance (metadata enable-guest-attributes is not TRUE)")

// guestAttributesEnabled: the instance's metadata has
// enable-guest-attributes = TRUE (any case).
func guestAttributesEnabled(pb *computepb.Instance) bool {
	for _, it := range pb.GetMetadata().GetItems() {
		if it.GetKey() == "enable-guest-attributes" {
			return strings.EqualFold(strings.TrimSpace(it.GetValue()), "true")
		}
	}
	return false
}

// SetGuestAttribute writes a guest attribute as the instance's guest would
// (a PUT to its metadata server): refused with ErrGuestAttributesDisabled
// unless the instance enables guest attributes, and refused when the
// instance is not RUNNING (no guest runs to write it).
func (s *Server) SetGuestAttribute(project, zone, name, namespace, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.guestInstance(project, zone, name)
	if err != nil {
		return err
	}
	if namespace == "" || key == "" || strings.Contains(namespace, "/") || strings.Contains(key, "/") {
		return fmt.Errorf("guest attribute %q/%q: namespace and key are one path segment each", namespace, key)
	}
	if in.guestAttrs == nil {
		in.guestAttrs = map[string]string{}
	}
	in.guestAttrs[namespace+"/"+key] = value
	return nil
}

// DeleteGuestAttribute withdraws a guest attribute as the guest would (a
// DELETE to its metadata server). Withdrawing one that is not there is
// fine.
func (s *Server) DeleteGuestAttribute(project, zone, name, namespace, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.guestInstance(project, zone, name)
	if err != nil {
		return err
	}
	delete(in.guestAttrs, namespace+"/"+key)
	return nil
}

// guestInstance is the instance whose guest writes, if it can.
func (s *Server) guestInstance(project, zone, name string) (*instance, error) {
	p := s.projects[project]
	if p == nil {
		return nil, NotFound("projects/" + project)
	}
	in := p.instances[zone+"/"+name]
	if in == nil {
		return nil, NotFound(instResource(p, zone, name))
	}
	if in.status() != "RUNNING" {
		return nil, fmt.Errorf("instance %s is %s: no guest runs to write a guest attribute", name, in.status())
	}
	if !guestAttributesEnabled(in.pb) {
		return nil, ErrGuestAttributesDisabled
	}
	return in, nil
}

// getGuestAttributes is instances.getGuestAttributes. It reads only: no
// operation advances.
func (s *Server) getGuestAttributes(w http.ResponseWriter, r *http.Request) {
	p, zone, name := s.resolveInstance(w, r)
	if p == nil {
		return
	}
	in := storedInstance(w, p, zone, name)
	if in == nil {
		return
	}
	q := r.URL.Query()
	self := in.pb.GetSelfLink() + "/guestAttributes/"
	if vk := q.Get("variableKey"); vk != "" {
		v, ok := in.guestAttrs[vk]
		if !ok {
			writeAPIError(w, NotFound(instResource(p, zone, name)+"/guestAttributes/"+vk))
			return
		}
		writeProto(w, &computepb.GuestAttributes{Kind: proto.String("compute#guestAttributes"), SelfLink: proto.String(self),
			VariableKey: proto.String(vk), VariableValue: proto.String(v)})
		return
	}
	path := q.Get("queryPath")
	if !guestQueryPath.MatchString(path) {
		// Fake's own text, in the API's invalid-value frame.
		writeAPIError(w, Invalid("queryPath", path, "Must be empty or of the form '<namespace>/' or '<namespace>/<key>'."))
		return
	}
	var items []*computepb.GuestAttributesEntry
	for k, v := range in.guestAttrs {
		ns, key, _ := strings.Cut(k, "/")
		if path == "" || path == ns+"/" || path == k {
			items = append(items, &computepb.GuestAttributesEntry{Namespace: proto.String(ns), Key: proto.String(key), Value: proto.String(v)})
		}
	}
	if len(items) == 0 {
		writeAPIError(w, NotFound(instResource(p, zone, name)+"/guestAttributes/"+path))
		return
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].GetNamespace() != items[j].GetNamespace() {
			return items[i].GetNamespace() < items[j].GetNamespace()
		}
		return items[i].GetKey() < items[j].GetKey()
	})
	writeProto(w, &computepb.GuestAttributes{Kind: proto.String("compute#guestAttributes"), SelfLink: proto.String(self),
		QueryPath: proto.String(path), QueryValue: &computepb.GuestAttributesValue{Items: items}})
}
