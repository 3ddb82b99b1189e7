package gcp

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// The serving signal (profile serving-signal: guest-attributes). The
// instance's startup script installs the guest's reporter
// (servingreport), which PUTs its report every servingreport.Interval to
// the metadata server's guest attribute egress-proxy/report; Get reads it
// back with instances.getGuestAttributes. google-guest-agent runs the
// startup script as root at every boot, whatever the user-data does, so a
// Proxy's own cloudInit gets the reporter too.

// Metadata keys the provider sets beside "user-data". An instance-level
// startup-script replaces a project-wide one on the provider's instances:
// GCE reads the instance's value of a key first.
const (
	metaUserData        = "user-data"
	metaGuestAttributes = "enable-guest-attributes"
	metaStartupScript   = "startup-script"
)

// guestAttributePath is the query path of the report: the key itself, not
// its namespace, so that the answer is the one value and a 404 means
// exactly "no report yet", whatever else someone writes into the
// namespace.
const guestAttributePath = servingreport.GuestAttributeNamespace + "/" + servingreport.GuestAttributeKey

// notReportedYet is the detail while the guest has written no report.
const notReportedYet = "the guest has not reported yet: its reporter starts with the startup script"

// startupScript is the startup-script metadata value: the reporter's
// installer for the Proxy's port, asking the entry's echo (if any).
func startupScript(port int32, echo egress.Echo) string {
	return "#!/bin/sh\n" + servingreport.Installer(servingreport.Config{Port: port, Publish: servingreport.PublishGuestAttribute, Echo: echo})
}

// reportsServing says whether the instance was made with the reporter:
// guest attributes enabled and a startup script. An instance made before
// the provider installed it has neither and never reports: it has no
// signal (ServingUnknown, Ready from its state and address, as before)
// and costs no call, so an operator upgrade neither turns running Proxies
// not Ready nor replaces them. Its replacement, for whatever reason it
// comes, reports.
func reportsServing(in *computepb.Instance) bool {
	var enabled, script bool
	for _, it := range in.GetMetadata().GetItems() {
		switch it.GetKey() {
		case metaGuestAttributes:
			enabled = strings.EqualFold(strings.TrimSpace(it.GetValue()), "true")
		case metaStartupScript:
			script = it.GetValue() != ""
		}
	}
	return enabled && script
}

// servingMemo is the last signal read for an instance: the GCE instance it
// was read from (ID and creation time, so an instance made again under the
// name reads its own) and when.
type servingMemo struct {
	instanceID uint64
	created    string
	read       time.Time
	signal     servingreport.Signal
}

// servingSignal is the serving signal of the RUNNING instance in, whose
// provider ID is id.
//
// Cost: at most one getGuestAttributes per instance per
// servingreport.Interval (the reporter's own pace: a read sooner cannot
// tell more). The last signal is kept per provider ID with the GCE
// instance's ID and creation time; a Get within Interval of that read
// reuses it and makes no call. So a provisioning instance polled every
// PollInterval (10 s) costs one call per poll, a running one polled every
// few minutes one per poll, and an instance without the reporter none.
// GCE asks guest attribute users for at most 10 queries per minute per
// instance; this is 6 at most. Errors are not kept: the next Get reads
// again.
func (p *Provider) servingSignal(ctx context.Context, api computeAPI, id string, in *computepb.Instance) (servingreport.Signal, error) {
	if !reportsServing(in) {
		p.forgetServing(id)
		return servingreport.Signal{}, nil
	}
	now := p.now()
	if s, ok := p.cachedServing(id, in, now); ok {
		return s, nil
	}
	zone, name, _ := parseID(id)
	ga, err := api.GetGuestAttributes(ctx, zone, name, guestAttributePath)
	var s servingreport.Signal
	switch {
	case err == nil:
		s = signalOf(ga, now)
	case isNoValue(err):
		s = servingreport.Unread(notReportedYet)
	default:
		return servingreport.Signal{}, guestAttributesError(err, id)
	}
	p.rememberServing(id, in, now, s)
	return s, nil
}

// signalOf reads the report out of the answer (its items are those under
// the query path: the report's entry, or none).
func signalOf(ga *computepb.GuestAttributes, now time.Time) servingreport.Signal {
	for _, it := range ga.GetQueryValue().GetItems() {
		if it.GetNamespace() != servingreport.GuestAttributeNamespace || it.GetKey() != servingreport.GuestAttributeKey {
			continue
		}
		r, err := servingreport.Parse(it.GetValue())
		if err != nil {
			return servingreport.Unread(clipProgress("the guest's report does not parse: " + err.Error()))
		}
		return r.Signal(now)
	}
	return servingreport.Unread(notReportedYet)
}

// isNoValue is GCE's answer for a query path with no value: 404 with an
// API error. The instance was read a moment before, so a 404 here is about
// the path, never "the instance is gone" (the next Get's instances.get
// says that). The front end's bare 404 (no API serves the path: a wrong
// endpoint) is not it.
func isNoValue(err error) bool {
	var gerr *googleapi.Error
	return errors.As(err, &gerr) && gerr.Code == http.StatusNotFound && (len(gerr.Errors) > 0 || gerr.Message != "")
}

// guestAttributesError classifies a failed read as every call's error is
// (classify), except that a throttled read is Transient: the instance is
// there and the next poll reads again, and QuotaExceeded would show a
// serving Proxy as out of capacity while a Transient Get keeps its Ready
// as it is.
func guestAttributesError(err error, id string) error {
	err = classify(err, call{what: "reading the serving report (guest attribute " + guestAttributePath + ") of instance " + id})
	if errors.Is(err, provider.ErrQuotaExceeded) {
		return reclassify(err, provider.ErrTransient, "throttled")
	}
	return err
}

func (p *Provider) cachedServing(id string, in *computepb.Instance, now time.Time) (servingreport.Signal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.serving[id]
	if !ok || m.instanceID != in.GetId() || m.created != in.GetCreationTimestamp() {
		return servingreport.Signal{}, false
	}
	if age := now.Sub(m.read); age < 0 || age >= servingreport.Interval {
		return servingreport.Signal{}, false
	}
	return m.signal, true
}

func (p *Provider) rememberServing(id string, in *computepb.Instance, now time.Time, s servingreport.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serving[id] = servingMemo{instanceID: in.GetId(), created: in.GetCreationTimestamp(), read: now, signal: s}
}

// forgetServing drops id's memo: the instance is not running (or gone), and
// a memo outliving it would only hold memory.
func (p *Provider) forgetServing(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.serving, id)
}
