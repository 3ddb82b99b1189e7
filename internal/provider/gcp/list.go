package gcp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// ourFilter selects this installation's instances in the aggregated
// list: the managed mark and the installation mark (the earlier providers filtered on
// the managed mark only, so two installations sharing a project collected
// each other's instances).
func (p *Provider) ourFilter() string {
	return fmt.Sprintf(`(labels.%s = "%s") AND (labels.%s = "%s")`,
		provider.MarkManaged, provider.MarkManagedValue, provider.MarkInstallation, p.opts.InstallationID)
}

// nameFilter selects every instance or rule named like one of ours,
// whoever marked it (the regular-expression form of the list filter).
const nameFilter = `name eq "` + provider.InstanceNamePrefix + `.*"`

// Warning codes of an aggregated list's zones.
const (
	warningNoResults = "NO_RESULTS_ON_PAGE"
)

// listing is one aggregated listing: the instances by zone, and the
// zones that answered with a warning instead of their instances.
type listing struct {
	instances []zoned
	// leftOut are the zones that answered with a warning (UNREACHABLE),
	// by zone, with the warning's code.
	leftOut map[string]string
}

type zoned struct {
	zone string
	in   *computepb.Instance
}

// listInstances reads every page of the aggregated list with filter. A
// zone that answers with a warning other than "no results on this page"
// is left out, logged, counted and noted: the collector deletes only what
// it saw, so leaving it out is safe, and the others are listed (profile
// list-partial: omit-unreachable).
func (p *Provider) listInstances(ctx context.Context, api computeAPI, filter, op string) (listing, error) {
	l := listing{leftOut: map[string]string{}}
	err := api.ListInstances(ctx, filter, func(scope string, part *computepb.InstancesScopedList) {
		zone := lastSegment(scope)
		if w := part.GetWarning(); w != nil && w.GetCode() != warningNoResults {
			l.leftOut[zone] = w.GetCode()
			return
		}
		for _, in := range part.GetInstances() {
			l.instances = append(l.instances, zoned{zone: zone, in: in})
		}
	})
	if err != nil {
		return listing{}, classify(err, call{what: "listing instances"})
	}
	if len(l.leftOut) > 0 {
		zones := make([]string, 0, len(l.leftOut))
		for z, code := range l.leftOut {
			zones = append(zones, z)
			zoneListWarnings.WithLabelValues(p.name, z, code).Inc()
		}
		sort.Strings(zones)
		logr.FromContextOrDiscard(ctx).Info("gcp zones left out of the listing: they answered with a warning; the others were listed",
			"operation", op, "zones", zones)
		provider.Note(ctx, "zonesLeftOut", strings.Join(zones, ","))
	}
	return l, nil
}

// ListByTag lists this installation's instances in every zone, with one
// paged aggregated list (ID, UID, CreatedAt, and the state and address
// the listing carries anyway), plus those whose create step is in flight
// and that the API does not show yet, so that the reconciler's sweep and
// the collector see an instance from its first moment.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	ctx = httpobserve.WithOp(ctx, provider.OpList)
	api, err := p.client()
	if err != nil {
		return nil, err
	}
	// The steps first: one that ends during the listing has inserted its
	// instance by then, so it is listed one way or the other.
	creating := p.creating.Snapshot()
	l, err := p.listInstances(ctx, api, p.ourFilter(), provider.OpList)
	if err != nil {
		return nil, err
	}
	var out []provider.Instance
	seen := map[string]bool{}
	for _, z := range l.instances {
		// The filter is the API's; the marks are checked again here, so a
		// filter an endpoint ignored cannot reach the collector.
		if m := provider.MarksFromLabels(z.in.GetLabels()); !m.Managed || m.Installation != p.opts.InstallationID {
			continue
		}
		seen[z.in.GetName()] = true
		out = append(out, p.describe(z.in, z.zone))
	}
	for name, ci := range creating {
		if !seen[name] {
			out = append(out, provider.Instance{ID: formatID(ci.zone, name), UID: ci.uid, State: provider.StateProvisioning, CreatedAt: ci.since})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Kind of the secondary resources (and kindAddress).
const kindFirewallRule = "firewall-rule"

// ListSecondary lists this installation's firewall rules (the marks in
// their descriptions) and the egress addresses it reserved that go with
// their Proxy (address.go: Instance empty, InstanceGone true; a retained
// or a user's address is never listed). Each rule comes with its
// instance and InstanceGone when the
// instance's zone was listed and holds no instance of that name (ours or
// not) and no create step for it runs here. The rules are listed first and
// the instances after, so an instance made in between is seen; a rule of a
// zone that was left out of the listing is never InstanceGone.
func (p *Provider) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	if err := provider.CtxErr(ctx, p.name, provider.OpListSecondary); err != nil {
		return nil, err
	}
	ctx = httpobserve.WithOp(ctx, provider.OpListSecondary)
	api, err := p.client()
	if err != nil {
		return nil, err
	}
	type ours struct {
		fw    *computepb.Firewall
		marks ruleMarks
	}
	var rules []ours
	err = api.ListFirewalls(ctx, nameFilter, func(fw *computepb.Firewall) {
		if m := parseRuleMarks(fw); m.Managed && m.Installation == p.opts.InstallationID {
			rules = append(rules, ours{fw: fw, marks: m})
		}
	})
	if err != nil {
		return nil, classify(err, call{what: "listing firewall rules"})
	}
	addresses, err := p.listAddressSecondaries(ctx, api)
	if err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return addresses, nil
	}
	// A create step that ends while the zones are listed inserted its
	// instance after the listing read that zone: a step running before the
	// listing counts as much as one running after it (seen once in the
	// conformance suite under load: a live instance's rule read
	// InstanceGone).
	creating := map[string]bool{}
	for _, r := range rules {
		if p.steps.Running(r.fw.GetName()) {
			creating[r.fw.GetName()] = true
		}
	}
	l, err := p.listInstances(ctx, api, nameFilter, provider.OpListSecondary)
	if err != nil {
		return nil, err
	}
	exists := map[string]bool{}
	for _, z := range l.instances {
		exists[z.zone+"/"+z.in.GetName()] = true
	}
	out := make([]provider.Secondary, 0, len(rules))
	for _, r := range rules {
		name := r.fw.GetName()
		zone := r.marks.Zone
		_, unreachable := l.leftOut[zone]
		s := provider.Secondary{
			ID:    formatRuleID(name, r.fw.GetId()),
			Kind:  kindFirewallRule,
			Marks: r.marks.Marks, Instance: name,
			InstanceGone: zoneName.MatchString(zone) && !unreachable && !exists[zone+"/"+name] && !creating[name] && !p.steps.Running(name),
		}
		if zoneName.MatchString(zone) {
			s.InstanceID = formatID(zone, name)
		}
		s.CreatedAt, _ = createdAt(r.fw.GetCreationTimestamp())
		out = append(out, s)
	}
	return append(out, addresses...), nil
}

// DeleteSecondary deletes one reserved egress address
// (deleteAddressSecondary) or one firewall rule, the rule under its instance's lock
// and only while that instance is still gone and the rule is still the one
// listed (its numeric ID): a Create that began since the collector judged
// it would otherwise lose its rule.
func (p *Provider) DeleteSecondary(ctx context.Context, id string) error {
	if err := provider.CtxErr(ctx, p.name, provider.OpDeleteSecondary); err != nil {
		return err
	}
	if isAddressID(id) {
		return p.deleteAddressSecondary(ctx, id)
	}
	name, ruleID, err := parseRuleID(id)
	if err != nil {
		return err
	}
	ctx = httpobserve.WithOp(ctx, provider.OpDeleteSecondary)
	ctx, cancel := context.WithTimeout(ctx, foregroundBound)
	defer cancel()
	unlock, err := p.names.Lock(ctx, name)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", name, err)
	}
	defer unlock()
	if p.steps.Running(name) {
		return provider.Errorf(provider.ErrTransient, "instance %s is being created again; its firewall rule is not deleted", name)
	}
	api, err := p.client()
	if err != nil {
		return err
	}
	fw, err := api.GetFirewall(ctx, name)
	if err != nil {
		err = classify(err, call{what: "reading firewall rule " + name, target: p.ruleTarget(name)})
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return err
	}
	m := parseRuleMarks(fw)
	if fw.GetId() != ruleID || !m.Managed || m.Installation != p.opts.InstallationID {
		return nil // made again since, or not ours: counts as deleted
	}
	if zoneName.MatchString(m.Zone) {
		_, err := api.GetInstance(ctx, m.Zone, name)
		if err == nil {
			return provider.Errorf(provider.ErrTransient, "instance %s exists again; its firewall rule is not deleted", formatID(m.Zone, name))
		}
		if err = classify(err, call{what: "reading instance " + name, target: p.instanceTarget(m.Zone, name)}); !errors.Is(err, provider.ErrNotFound) {
			return err
		}
	}
	if err := p.deleteRule(ctx, api, name, foregroundRuleWait); err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("gcp orphaned firewall rule deleted", "rule", name)
	return nil
}
