package gcp

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The managed firewall rule of an instance: one VPC ingress rule, named
// after the instance, admitting the Proxy's allowedSourceRanges (the IPv4
// ones: the instances' NIC is IPv4 only) to its port over TCP, on a network
// tag only that instance carries. It is made before the instance (it opens
// nothing until an instance with the tag exists), kept in step by every
// Create that reaches the instance, and deleted after the instance. Empty
// ranges open nothing: no rule at all, never a rule without sources (the
// API would fill in 0.0.0.0/0).
//
// allowedSourceRanges is part of a Proxy's shape (the instance name hashes
// it), so a change of the ranges gives a new instance with its own rule,
// made before the old instance and its rule are deleted (make before
// break); "kept in step" is Create repairing a rule that differs from the
// request under the same name (edited by hand, or made by an older
// version), which Create replaces whole (firewalls.update).

// desiredRule is the rule req needs, or nil when it needs none.
func (p *Provider) desiredRule(pl plan, req provider.CreateRequest) *computepb.Firewall {
	if len(pl.ruleRanges) == 0 {
		return nil
	}
	marks := ruleMarks{Marks: provider.Marks{Managed: true, UID: req.UID, Installation: p.opts.InstallationID}, Zone: pl.zone}
	return &computepb.Firewall{
		Name:         proto.String(req.Name),
		Description:  proto.String(marks.description(req.Namespace, req.ProxyName, req.Port)),
		Network:      proto.String(p.netPath),
		Direction:    proto.String("INGRESS"),
		Priority:     proto.Int32(*p.cfg.FirewallPriority),
		Allowed:      []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{strconv.Itoa(int(req.Port))}}},
		SourceRanges: slices.Clone(pl.ruleRanges),
		TargetTags:   []string{instanceTag(p.cfg.NetworkTagPrefix, req.Name)},
		Disabled:     proto.Bool(false),
	}
}

// ruleMatches says whether have is the rule want describes.
func ruleMatches(have, want *computepb.Firewall) bool {
	if have.GetDirection() != want.GetDirection() || have.GetPriority() != want.GetPriority() || have.GetDisabled() ||
		have.GetDescription() != want.GetDescription() || !sameNetwork(have.GetNetwork(), want.GetNetwork()) ||
		len(have.GetDenied()) > 0 || len(have.GetSourceTags()) > 0 || len(have.GetSourceServiceAccounts()) > 0 ||
		len(have.GetTargetServiceAccounts()) > 0 || len(have.GetDestinationRanges()) > 0 {
		return false
	}
	if len(have.GetAllowed()) != 1 || have.GetAllowed()[0].GetIPProtocol() != "tcp" ||
		!slices.Equal(have.GetAllowed()[0].GetPorts(), want.GetAllowed()[0].GetPorts()) {
		return false
	}
	return sameSet(have.GetSourceRanges(), want.GetSourceRanges()) && sameSet(have.GetTargetTags(), want.GetTargetTags())
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func sameNetwork(a, b string) bool { return trimURL(a) == trimURL(b) }

// ruleTarget is the path a rule's 404 names.
func (p *Provider) ruleTarget(name string) string {
	return "projects/" + p.netProject + "/global/firewalls/" + name
}

// ensureRule makes the instance's rule what req needs: inserts it,
// replaces a rule of ours that differs, deletes one of ours that is no
// longer wanted (no IPv4 ranges), and refuses, Permanent, a rule under the
// name that is not this installation's or another Proxy's. With wait it
// waits for the operation and reports its failure (the create step);
// without, it only submits (Create's foreground, which must stay within
// its bound: a failed operation shows on the next ensure).
func (p *Provider) ensureRule(ctx context.Context, api computeAPI, pl plan, req provider.CreateRequest, wait bool) error {
	want := p.desiredRule(pl, req)
	name := req.Name
	log := logr.FromContextOrDiscard(ctx)
	have, err := api.GetFirewall(ctx, name)
	if err != nil {
		err = classify(err, call{what: "reading firewall rule " + name, target: p.ruleTarget(name)})
		if !errors.Is(err, provider.ErrNotFound) {
			return err
		}
		have = nil
	}
	if have != nil {
		m := parseRuleMarks(have)
		switch {
		case !m.Managed || m.Installation != p.opts.InstallationID:
			return provider.Errorf(provider.ErrPermanent,
				"firewall rule %s exists but is not this operator installation's; rename or remove it", name)
		case m.UID != "" && m.UID != req.UID:
			return provider.Errorf(provider.ErrPermanent, "firewall rule %s belongs to another Proxy (UID mismatch)", name)
		}
	}
	var op *computepb.Operation
	var what string
	switch {
	case want == nil && have == nil:
		return nil
	case want == nil:
		what = "deleting firewall rule " + name + " (the Proxy admits no IPv4 range)"
		op, err = api.DeleteFirewall(ctx, name)
		if err != nil && (isNotFound(err) || isBusy(err)) {
			return nil
		}
	case have == nil:
		what = "creating firewall rule " + name
		log.V(2).Info("gcp firewall rule", "rule", name, "sourceRanges", want.GetSourceRanges(), "port", req.Port,
			"targetTags", want.GetTargetTags(), "network", p.netPath)
		op, err = api.InsertFirewall(ctx, want)
		if err != nil && isAlreadyExists(err) {
			// Made meanwhile (another replica, a Create racing this one):
			// read it again next time.
			return provider.Errorf(provider.ErrTransient, "firewall rule %s was created meanwhile; checking it again", name)
		}
	case !sameNetwork(have.GetNetwork(), want.GetNetwork()):
		return provider.Errorf(provider.ErrPermanent,
			"firewall rule %s is on network %s, the entry's network is %s: a rule cannot move; delete it so that it is made again", name,
			trimURL(have.GetNetwork()), p.netPath)
	case ruleMatches(have, want):
		return nil
	default:
		what = "updating firewall rule " + name
		log.V(1).Info("gcp firewall rule differs from the request; replacing it", "rule", name,
			"sourceRanges", have.GetSourceRanges(), "wantSourceRanges", want.GetSourceRanges())
		op, err = api.UpdateFirewall(ctx, name, want)
	}
	if err != nil {
		return classify(err, call{what: what})
	}
	if !wait {
		return nil
	}
	op, err = waitGlobalOp(ctx, api, op, what)
	if err != nil {
		return err
	}
	return opError(op, what)
}

// removeRule deletes the instance's rule when it is this installation's;
// what is gone, not ours, or being deleted already is fine. It waits for
// the delete's operation at most wait (0: to the end, in the delete step;
// briefly in a caller's foreground), and a rule whose delete did not
// finish or failed is an orphan the collector removes (ListSecondary).
func (p *Provider) removeRule(ctx context.Context, api computeAPI, name string, wait time.Duration) error {
	fw, err := api.GetFirewall(ctx, name)
	if err != nil {
		err = classify(err, call{what: "reading firewall rule " + name, target: p.ruleTarget(name)})
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return err
	}
	if m := parseRuleMarks(fw); !m.Managed || m.Installation != p.opts.InstallationID {
		return nil
	}
	if err := p.deleteRule(ctx, api, name, wait); err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("gcp firewall rule deleted", "rule", name)
	provider.Note(ctx, "firewallRule", "deleted")
	return nil
}

// deleteRule deletes the rule named name and waits for the operation at
// most wait (0: to the end of ctx). Gone or being deleted already is fine;
// a delete not waited for to its end is fine too (submitted).
func (p *Provider) deleteRule(ctx context.Context, api computeAPI, name string, wait time.Duration) error {
	what := "deleting firewall rule " + name
	op, err := api.DeleteFirewall(ctx, name)
	switch {
	case err != nil && (isNotFound(err) || isBusy(err)):
		return nil
	case err != nil:
		return classify(err, call{what: what})
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if wait > 0 {
		wctx, cancel = context.WithTimeout(ctx, wait)
	}
	defer cancel()
	if op, err = waitGlobalOp(wctx, api, op, what); err != nil {
		if wctx.Err() != nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("gcp firewall rule delete submitted; not waited for to the end", "rule", name)
			return nil
		}
		return err
	}
	if err := opError(op, what); err != nil {
		return err
	}
	return nil
}
