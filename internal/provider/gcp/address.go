package gcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
)

// The egress address (spec.egressAddress): a regional static external
// address that every instance of a Proxy egresses from in turn. GCE gives
// an instance a static address through its access config's natIP, on
// insert or with addAccessConfig; an address is held by one instance at a
// time, so a replacement's new instance comes up on an ephemeral address
// while the old one still serves, and MoveEgressAddress takes the address
// over at the cutover (deleteAccessConfig on the old instance, then on the
// new one its ephemeral config goes and addAccessConfig puts the address
// there).
//
// An address the provider reserves (Reserve) carries the marks as labels,
// as instances do, and markReclaim; ListSecondary lists it for the
// collector unless it is retained. The user's own address is read, never
// labelled, changed or listed.
//
// A ProxyGroup's address (EgressAddress.Group) is never seen by Create: the
// group's controller moves it to the member holding the group's endpoint,
// so MoveEgressAddress reserves it (marked with the group's UID) on the
// first move and takes it from any instance of this installation.

// markReclaim says what becomes of a reserved address when its Proxy goes:
// reclaimDelete (the collector deletes it) or reclaimRetain (it stays,
// marked, and is never listed). A label key within GCE's rules, beside the
// marks' proxy-operator-* keys.
const (
	markReclaim   = "proxy-operator-reclaim"
	reclaimDelete = "delete"
	reclaimRetain = "retain"
)

// Progress details of the create step's address part.
const (
	progressAddressReserve = "reserving the egress address"
	progressAddressCheck   = "reading the egress address"
)

// kindAddress is the secondary resource kind of a reserved address.
const kindAddress = "address"

// moveBound bounds a whole move: up to four operations of a few seconds
// each on GCE, longer than provider.CallBound allows a lifecycle call but
// within the reconciler's call timeout (a minute by default). A move cut
// short is resumed by the next call (it is idempotent).
const moveBound = 50 * time.Second

// foregroundAddressWait is how long DeleteSecondary waits for an
// address's delete operation; one not waited for to its end is fine.
const foregroundAddressWait = 2 * time.Second

// The access config a moved address is put in, as the insert names it.
const (
	externalNATName = "External NAT"
	oneToOneNAT     = "ONE_TO_ONE_NAT"
)

// reasonInUse is the API's reason for deleting an address an instance
// holds (400).
const reasonInUse = "resourceInUseByAnotherResource"

// opIPInUse is the operation error of an insert or addAccessConfig whose
// natIP another resource took first.
const opIPInUse = "IP_IN_USE_BY_ANOTHER_RESOURCE"

// The kinds of an address's owner, as messages and descriptions name them.
const (
	ownerProxy = "Proxy"
	ownerGroup = "ProxyGroup"
)

// addressOwner is whose reserved address it is: a Proxy's (Create) or a
// ProxyGroup's (MoveEgressAddress with Group). Its UID is the address's
// UID mark.
type addressOwner struct {
	namespace, name string
	kind            string // ownerProxy or ownerGroup
	uid             string
}

func proxyOwner(req provider.CreateRequest) addressOwner {
	return addressOwner{namespace: req.Namespace, name: req.ProxyName, kind: ownerProxy, uid: req.UID}
}

func groupOwner(g *provider.GroupRef) addressOwner {
	return addressOwner{namespace: g.Namespace, name: g.Name, kind: ownerGroup, uid: g.UID}
}

// field names the owner's egress address in messages: the Proxy's
// spec.egressAddress, or the group's, named (the group's address is no
// member's, and the member's events would not say which group).
func (o addressOwner) field() string {
	if o.kind == ownerGroup {
		return ownerGroup + " " + o.namespace + "/" + o.name + " spec.egressAddress"
	}
	return "spec.egressAddress"
}

// moveField is field for a move's address: without Group the move does
// not know the Proxy, only that it is its spec.egressAddress.
func moveField(addr provider.EgressAddress) string {
	if addr.Group != nil {
		return groupOwner(addr.Group).field()
	}
	return "spec.egressAddress"
}

func reclaimValue(retain bool) string {
	if retain {
		return reclaimRetain
	}
	return reclaimDelete
}

// internalRefusal is the refusal of an egress address in internal mode.
func internalRefusal() error {
	return provider.Errorf(provider.ErrPermanent,
		"spec.egressAddress: this entry's addressMode is internal, and internal addresses are not kept yet: "+
			"the instance's networkIP cannot move between running instances (use an entry with addressMode external, or remove spec.egressAddress)")
}

// checkEgressAddress refuses, before any call, a request's egress address
// the provider cannot keep.
func (p *Provider) checkEgressAddress(ea *provider.EgressAddress) error {
	if ea == nil {
		return nil
	}
	if p.cfg.AddressMode != AddressExternal {
		return internalRefusal()
	}
	if !gceName.MatchString(ea.Name) {
		return provider.Errorf(provider.ErrPermanent, "spec.egressAddress.name %q is not a GCE address name (%s)", ea.Name, gceNameRule)
	}
	return nil
}

// addressTarget is the path an address's 404 names.
func (p *Provider) addressTarget(region, name string) string {
	return "projects/" + p.cfg.Project + "/regions/" + region + "/addresses/" + name
}

// addressLabels are the labels a reserved address carries: have (a label
// added by hand stays), the marks and the reclaim label.
func addressLabels(have map[string]string, marks provider.Marks, retain bool) map[string]string {
	out := make(map[string]string, len(have)+4)
	maps.Copy(out, have)
	maps.Copy(out, marks.Labels())
	out[markReclaim] = reclaimValue(retain)
	return out
}

// ensureEgressAddress is the create step's address part, before the
// insert: the address is reserved (Reserve) or read (the user's), and the
// address the insert names is returned: the address when it is free, nil
// (an ephemeral address) when another instance of the same Proxy holds it
// (a replacement: the address moves at the cutover). Anything else holding
// it is Permanent, naming the holder.
func (p *Provider) ensureEgressAddress(ctx context.Context, api computeAPI, pl plan, req provider.CreateRequest, progress func(string)) (*computepb.Address, error) {
	ea := req.EgressAddress
	var a *computepb.Address
	var err error
	if ea.Reserve {
		progress(progressAddressReserve)
		a, err = p.reserveAddress(ctx, api, pl.region, *ea, proxyOwner(req))
	} else {
		progress(progressAddressCheck)
		a, err = p.usersAddress(ctx, api, pl, ea.Name)
	}
	if err != nil {
		return nil, err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("address", ea.Name, "ip", a.GetAddress(), "status", a.GetStatus())
	switch a.GetStatus() {
	case "RESERVED":
		log.V(1).Info("gcp egress address free; the instance is inserted with it")
		return a, nil
	case "IN_USE":
	default: // RESERVING: an insert of it (not this step's) still runs
		return nil, provider.Errorf(provider.ErrTransient, "egress address %s is %s; the instance is created once it is reserved", p.addressPath(pl.region, ea.Name), a.GetStatus())
	}
	for _, u := range a.GetUsers() {
		h, err := p.readHolder(ctx, api, u)
		if err != nil {
			return nil, err
		}
		switch {
		case h.zone == pl.zone && h.name == req.Name:
			// This very instance, whose insert was accepted before: the
			// same body again, so that its request ID replays it.
			return a, nil
		case h.ours && h.marks.UID == req.UID:
			log.V(1).Info("gcp egress address held by another instance of the same Proxy; this instance gets an ephemeral address until the cutover moves it",
				"holder", h.path)
			return nil, nil
		}
		return nil, provider.Errorf(provider.ErrPermanent, "spec.egressAddress: address %s (%s) is in use by %s%s",
			p.addressPath(pl.region, ea.Name), a.GetAddress(), h.path, h.whose(p.opts.InstallationID))
	}
	// IN_USE without users: the API is between two states.
	return nil, provider.Errorf(provider.ErrTransient, "egress address %s is IN_USE by nobody the API names yet; read again", p.addressPath(pl.region, ea.Name))
}

// addressPath names an address in messages: regions/<r>/addresses/<name>.
func (p *Provider) addressPath(region, name string) string {
	return "regions/" + region + "/addresses/" + name
}

// reserveAddress reads owner's reserved address, reserving it when it
// does not exist (its regional operation followed to the end), and keeps
// its marks and reclaim label in step. An address of the name that is not
// this installation's or belongs to another owner is Permanent. Create
// (a Proxy's) and MoveEgressAddress (a group's) share it, so that both
// reserve and refuse alike.
func (p *Provider) reserveAddress(ctx context.Context, api computeAPI, region string, ea provider.EgressAddress, owner addressOwner) (*computepb.Address, error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("address", ea.Name, "region", region)
	path := p.addressPath(region, ea.Name)
	field := owner.field()
	marks := provider.Marks{Managed: true, UID: owner.uid, Installation: p.opts.InstallationID}
	a, err := p.readAddress(ctx, api, region, ea.Name)
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		return nil, err
	}
	if a == nil {
		what := "reserving egress address " + path
		body := &computepb.Address{
			Name:        proto.String(ea.Name),
			AddressType: proto.String("EXTERNAL"),
			Description: proto.String(addressDescription(owner)),
			Labels:      addressLabels(nil, marks, ea.Retain),
		}
		log.V(1).Info("gcp egress address reserving", "labels", body.GetLabels())
		op, err := api.InsertAddress(ctx, region, body)
		switch {
		case err != nil && isAlreadyExists(err):
			log.V(1).Info("gcp egress address reserved meanwhile; reading it")
		case err != nil:
			return nil, classify(err, call{what: what})
		default:
			if op, err = waitRegionOp(ctx, api, region, op, what); err != nil {
				return nil, err
			}
			if err := opError(op, what); err != nil {
				log.V(1).Info("gcp egress address reservation failed", "operation", op.GetName(), "codes", opCodes(op), "class", provider.ClassName(err))
				return nil, err
			}
		}
		if a, err = p.readAddress(ctx, api, region, ea.Name); err != nil {
			return nil, reclassify(err, notFoundIsTransient(err), "reading the reserved egress address")
		}
		log.V(1).Info("gcp egress address reserved", "ip", a.GetAddress())
	}
	have := provider.MarksFromLabels(a.GetLabels())
	switch {
	case !have.Managed || have.Installation != p.opts.InstallationID:
		hint := "name it in spec.egressAddress.name to use it as the Proxy's own, or remove it"
		if owner.kind == ownerGroup {
			hint = "name it in the ProxyGroup's spec.egressAddress.name to use it as the group's own, or remove it"
		}
		return nil, provider.Errorf(provider.ErrPermanent,
			"%s: address %s exists and was not reserved by this operator installation; %s", field, path, hint)
	case have.UID != "" && have.UID != owner.uid:
		other := "another Proxy"
		if owner.kind == ownerGroup {
			other = "another Proxy or ProxyGroup"
		}
		return nil, provider.Errorf(provider.ErrPermanent, "%s: address %s belongs to %s (UID %s)", field, path, other, have.UID)
	case a.GetAddressType() != "EXTERNAL":
		return nil, provider.Errorf(provider.ErrPermanent, "%s: address %s is %s, not EXTERNAL", field, path, a.GetAddressType())
	}
	want := addressLabels(a.GetLabels(), marks, ea.Retain)
	if maps.Equal(want, a.GetLabels()) {
		return a, nil
	}
	// The reclaim policy changed (or an empty UID mark is filled in).
	what := "writing the labels of egress address " + path
	op, err := api.SetAddressLabels(ctx, region, ea.Name, want, a.GetLabelFingerprint())
	if err != nil {
		return nil, classify(err, call{what: what})
	}
	if op, err = waitRegionOp(ctx, api, region, op, what); err != nil {
		return nil, err
	}
	if err := opError(op, what); err != nil {
		return nil, err
	}
	log.V(1).Info("gcp egress address labels updated", markReclaim, want[markReclaim], "was", a.GetLabels()[markReclaim])
	a.Labels = want
	return a, nil
}

// addressDescription is a reserved address's description: whose it is and
// where it goes, for a person reading the console.
func addressDescription(o addressOwner) string {
	if o.kind == ownerGroup {
		return fmt.Sprintf("Egress address of ProxyGroup %s/%s (egress-proxies-operator): it moves to the member instance that holds the group's endpoint; label %s says whether it goes with the ProxyGroup.",
			o.namespace, o.name, markReclaim)
	}
	return fmt.Sprintf("Egress address of Proxy %s/%s (egress-proxies-operator): it moves to each new instance of the Proxy; label %s says whether it goes with the Proxy.",
		o.namespace, o.name, markReclaim)
}

// readAddress reads an address; a 404 naming it is NotFound (nil address).
func (p *Provider) readAddress(ctx context.Context, api computeAPI, region, name string) (*computepb.Address, error) {
	a, err := api.GetAddress(ctx, region, name)
	if err != nil {
		return nil, classify(err, call{what: "reading egress address " + p.addressPath(region, name), target: p.addressTarget(region, name)})
	}
	return a, nil
}

// usersAddress reads the user's address (spec.egressAddress.name) in the
// instance's region. One that is not there is looked for in every region,
// to tell "in another region" from "not found"; both are Permanent, as is
// an internal address.
func (p *Provider) usersAddress(ctx context.Context, api computeAPI, pl plan, name string) (*computepb.Address, error) {
	a, err := p.readAddress(ctx, api, pl.region, name)
	if err == nil {
		if a.GetAddressType() != "EXTERNAL" {
			return nil, provider.Errorf(provider.ErrPermanent,
				"spec.egressAddress.name %q is an %s address; an instance's egress address must be EXTERNAL", name, a.GetAddressType())
		}
		return a, nil
	}
	if !errors.Is(err, provider.ErrNotFound) {
		return nil, err
	}
	return nil, p.missingAddress(ctx, api, "spec.egressAddress.name", pl.zone, pl.region, name)
}

// missingAddress is the refusal of a user's address that is not in the
// instance's region (field names it): Permanent, saying whether it is in
// another region or nowhere, which needs a look at every region.
func (p *Provider) missingAddress(ctx context.Context, api computeAPI, field, zone, region, name string) error {
	var elsewhere []string
	err := api.ListAddresses(ctx, `name eq "`+name+`"`, func(scope string, part *computepb.AddressesScopedList) {
		for _, other := range part.GetAddresses() {
			if other.GetName() == name {
				elsewhere = append(elsewhere, lastSegment(scope))
			}
		}
	})
	if err != nil {
		return classify(err, call{what: "looking for address " + name + " in other regions"})
	}
	if len(elsewhere) > 0 {
		slices.Sort(elsewhere)
		return provider.Errorf(provider.ErrPermanent,
			"%s %q is an address of region %s, but the instance's zone %s is in region %s: an instance can only use an address of its own region",
			field, name, strings.Join(elsewhere, ", "), zone, region)
	}
	return provider.Errorf(provider.ErrPermanent,
		"%s %q: no address of that name in region %s of project %s", field, name, region, p.cfg.Project)
}

// holder is the instance an address's users name.
type holder struct {
	path       string // zones/<z>/instances/<n>, or the user's link as given
	zone, name string
	marks      provider.Marks
	// ours: this installation's managed instance.
	ours bool
	in   *computepb.Instance
}

// whose says, for a message, what the holder is when it is ours.
func (h holder) whose(installation string) string {
	if h.ours {
		return ", an instance of another Proxy of this operator installation (UID " + h.marks.UID + ")"
	}
	return ""
}

// readHolder reads the instance a user link names. A user that is no
// instance of this project is a holder with its link only (never ours); an
// instance gone since the address was read is Transient (read again).
func (p *Provider) readHolder(ctx context.Context, api computeAPI, link string) (holder, error) {
	zone, name, ok := p.instanceOfLink(link)
	if !ok {
		return holder{path: trimURL(link)}, nil
	}
	h := holder{path: formatID(zone, name), zone: zone, name: name}
	in, err := api.GetInstance(ctx, zone, name)
	if err != nil {
		err = classify(err, call{what: "reading instance " + h.path + ", which holds the egress address", target: p.instanceTarget(zone, name)})
		return holder{}, reclassify(err, notFoundIsTransient(err), "the egress address's holder")
	}
	h.in = in
	h.marks = provider.MarksFromLabels(in.GetLabels())
	h.ours = h.marks.Managed && h.marks.Installation == p.opts.InstallationID
	return h, nil
}

// instanceOfLink parses an instance link of the entry's project
// (https://.../projects/<p>/zones/<z>/instances/<n>).
func (p *Provider) instanceOfLink(link string) (zone, name string, ok bool) {
	parts := strings.Split(trimURL(link), "/")
	n := len(parts)
	if n < 6 || parts[n-6] != "projects" || parts[n-5] != p.cfg.Project || parts[n-4] != idZones || parts[n-2] != idInstances ||
		!zoneName.MatchString(parts[n-3]) || !gceName.MatchString(parts[n-1]) {
		return "", "", false
	}
	return parts[n-3], parts[n-1], true
}

// ipTakenMeanwhile says whether a finished operation failed because the
// address it named was taken first: the next call reads who has it.
func ipTakenMeanwhile(op *computepb.Operation) bool {
	for _, e := range op.GetError().GetErrors() {
		if e.GetCode() == opIPInUse {
			return true
		}
	}
	return false
}

// natConfig is the access config of nic that holds ip, or nil.
func natConfig(nic *computepb.NetworkInterface, ip string) *computepb.AccessConfig {
	for _, ac := range nic.GetAccessConfigs() {
		if ac.GetNatIP() == ip {
			return ac
		}
	}
	return nil
}

// MoveEgressAddress makes instance toID hold addr: the instance holding it
// (fromID, or another instance of toID's Proxy) gives it up
// (deleteAccessConfig), then toID's own access config (its ephemeral
// address) goes and addAccessConfig puts the address there, each operation
// followed to its end. It is idempotent: an address already on toID costs
// one read, and a move cut short is resumed from where the address is.
//
// A group's address (addr.Group) is reserved here when Reserve and it does
// not exist yet (marked with the group's UID; Create never sees it), and
// is taken from any instance of this installation: the group's members are
// different Proxies, and the group decided the move. An instance of
// another installation, or anything else, is never taken from.
//
// The gap: from the old instance losing the address (its
// deleteAccessConfig, whose operation takes effect while it runs) to the
// new one having it (addAccessConfig DONE) neither instance has the
// address, and the old one has no external address at all: clients of
// the old endpoint and its egress stop for that time (a few seconds per
// operation on GCE, two or three operations).
func (p *Provider) MoveEgressAddress(ctx context.Context, addr provider.EgressAddress, fromID, toID string) error {
	toZone, toName, err := parseID(toID)
	if err != nil {
		return err
	}
	var fromZone, fromName string
	if fromID != "" {
		if fromZone, fromName, err = parseID(fromID); err != nil {
			return err
		}
	}
	if err := p.checkEgressAddress(&addr); err != nil {
		return err
	}
	if addr.Group != nil && addr.Group.UID == "" {
		// Its UID is the address's owner mark: without it the address
		// would be nobody's.
		return provider.Errorf(provider.ErrPermanent, "egress address %s: its ProxyGroup %s/%s has no UID", addr.Name, addr.Group.Namespace, addr.Group.Name)
	}
	region := regionOf(toZone)
	path := p.addressPath(region, addr.Name)
	field := moveField(addr)
	// The boundary's logger names the address, to (id) and from already.
	log := logr.FromContextOrDiscard(ctx).WithValues("region", region)
	ctx = httpobserve.WithOp(logr.NewContext(ctx, log), provider.OpMoveEgressAddress)
	ctx, cancel := context.WithTimeout(ctx, moveBound)
	defer cancel()
	unlock, err := p.names.Lock(ctx, toName)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", toName, err)
	}
	defer unlock()
	api, err := p.client()
	if err != nil {
		return err
	}
	start := time.Now()
	var a *computepb.Address
	switch {
	case addr.Group != nil && addr.Reserve:
		// The group's own address has no Create to reserve it: the first
		// move does, as Create does a Proxy's (one read once it exists).
		a, err = p.reserveAddress(ctx, api, region, addr, groupOwner(addr.Group))
	default:
		a, err = p.readAddress(ctx, api, region, addr.Name)
		if addr.Group != nil && errors.Is(err, provider.ErrNotFound) {
			// The user's address the group names: it must exist (a Proxy's
			// is refused by Create; a group's first shows here).
			err = p.missingAddress(ctx, api, field+".name", toZone, region, addr.Name)
		}
	}
	if err != nil {
		// Never NotFound: that would say toID is gone.
		return reclassify(err, notFoundIsTransient(err), "moving the egress address")
	}
	if a.GetAddressType() != "EXTERNAL" {
		return provider.Errorf(provider.ErrPermanent, "%s: address %s is %s; only an EXTERNAL address moves", field, path, a.GetAddressType())
	}
	ip := a.GetAddress()
	users := a.GetUsers()
	if len(users) == 1 {
		if z, n, ok := p.instanceOfLink(users[0]); ok && z == toZone && n == toName {
			log.V(1).Info("gcp egress address already on the instance; nothing to move", "ip", ip)
			provider.Note(ctx, "moved", "already")
			// A move that failed after the address moved owes its
			// earlier holder an address still.
			return p.giveEphemeralBack(ctx, api, path)
		}
	}
	if a.GetStatus() == "RESERVING" {
		return provider.Errorf(provider.ErrTransient, "egress address %s is still being reserved; it is moved once it is", path)
	}
	to, err := api.GetInstance(ctx, toZone, toName)
	if err != nil {
		return classify(err, call{what: "reading instance " + toID, target: p.instanceTarget(toZone, toName)})
	}
	toMarks := provider.MarksFromLabels(to.GetLabels())
	if !toMarks.Managed || toMarks.Installation != p.opts.InstallationID {
		return provider.Errorf(provider.ErrNotFound, "instance %s is not this installation's", toID)
	}
	nic := nicOf(to)
	if nic == nil {
		return provider.Errorf(provider.ErrPermanent, "instance %s has no network interface to put egress address %s on", toID, path)
	}

	// The holder gives it up first: an address is on one instance at a time.
	var released time.Time
	for _, u := range users {
		h, err := p.readHolder(ctx, api, u)
		if err != nil {
			return err
		}
		if h.zone == toZone && h.name == toName {
			continue
		}
		isFrom := fromID != "" && h.zone == fromZone && h.name == fromName
		sameProxy := toMarks.UID != "" && h.marks.UID == toMarks.UID
		// A group's address goes between different Proxies' instances:
		// any of ours gives it up, whatever its UID.
		grouped := addr.Group != nil
		if !h.ours || (!grouped && !isFrom && !sameProxy) {
			whose := h.whose(p.opts.InstallationID)
			switch {
			case whose != "":
			case grouped:
				whose = ", not an instance of this operator installation"
			default:
				whose = ", not an instance of this Proxy"
			}
			return provider.Errorf(provider.ErrPermanent, "%s: address %s (%s) is in use by %s%s; not moved", field, path, ip, h.path, whose)
		}
		hnic := nicOf(h.in)
		ac := natConfig(hnic, ip)
		if ac == nil {
			// Listed as its user, without the access config yet: an
			// addAccessConfig on it still runs.
			return provider.Errorf(provider.ErrTransient, "egress address %s is being put on instance %s; moved once that ends", path, h.path)
		}
		if released.IsZero() {
			released = time.Now()
		}
		if err := p.accessConfigOp(ctx, api, h.zone, h.name, "deleteAccessConfig", "", func() (*computepb.Operation, error) {
			return api.DeleteAccessConfig(ctx, h.zone, h.name, hnic.GetName(), ac.GetName())
		}); err != nil {
			return err
		}
		if grouped {
			// A member that still runs (the holder that stopped serving,
			// or one a move whose status was never written left the
			// address on), with no external address, could never egress
			// nor serve again: it gets an ephemeral one back once the new
			// holder has the group's.
			p.oweEphemeral(h.zone, h.name)
		}
	}

	// toID's own access config (its ephemeral address) goes: a network
	// interface has at most one.
	for _, ac := range nic.GetAccessConfigs() {
		if released.IsZero() {
			released = time.Now()
		}
		if err := p.accessConfigOp(ctx, api, toZone, toName, "deleteAccessConfig", p.instanceTarget(toZone, toName), func() (*computepb.Operation, error) {
			return api.DeleteAccessConfig(ctx, toZone, toName, nic.GetName(), ac.GetName())
		}); err != nil {
			return err
		}
	}
	if released.IsZero() {
		released = time.Now()
	}
	body := &computepb.AccessConfig{Name: proto.String(externalNATName), Type: proto.String(oneToOneNAT), NatIP: proto.String(ip)}
	if tier := a.GetNetworkTier(); tier != "" {
		body.NetworkTier = proto.String(tier)
	}
	if err := p.accessConfigOp(ctx, api, toZone, toName, "addAccessConfig", p.instanceTarget(toZone, toName), func() (*computepb.Operation, error) {
		return api.AddAccessConfig(ctx, toZone, toName, nic.GetName(), body)
	}); err != nil {
		return err
	}
	done := time.Now()
	log.V(1).Info("gcp egress address moved", "ip", ip,
		"seconds", fmt.Sprintf("%.3f", done.Sub(start).Seconds()), "gapSeconds", fmt.Sprintf("%.3f", done.Sub(released).Seconds()))
	provider.Note(ctx, "moved", "yes", "gapSeconds", fmt.Sprintf("%.3f", done.Sub(released).Seconds()))
	return p.giveEphemeralBack(ctx, api, path)
}

// oweEphemeral records that instance zone/name gave a group's egress
// address up and has no external address now.
func (p *Provider) oweEphemeral(zone, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owedEphemeral == nil {
		p.owedEphemeral = map[string]bool{}
	}
	p.owedEphemeral[formatID(zone, name)] = true
}

// giveEphemeralBack gives each instance that gave a group's address up an
// ephemeral external address (addAccessConfig without natIP), unless it is
// gone or has an access config already. A failure leaves it owed and is
// Transient: the group's controller moves again with backoff, and the
// move (already done) settles what is owed. The memory is the process's:
// after a restart an instance left without an address is noticed only by
// a person (it never becomes ready: its Proxy says so).
func (p *Provider) giveEphemeralBack(ctx context.Context, api computeAPI, path string) error {
	p.mu.Lock()
	owed := slices.Collect(maps.Keys(p.owedEphemeral))
	p.mu.Unlock()
	log := logr.FromContextOrDiscard(ctx)
	for _, id := range owed {
		zone, name, err := parseID(id)
		if err != nil {
			return err // written by formatID: never
		}
		in, err := api.GetInstance(ctx, zone, name)
		switch {
		case isNotFound(err):
		case err != nil:
			return reclassify(classify(err, call{what: "reading instance " + id + ", which gave egress address " + path + " up"}),
				provider.ErrTransient, "giving an ephemeral address back")
		case nicOf(in) != nil && len(nicOf(in).GetAccessConfigs()) == 0:
			nic := nicOf(in).GetName()
			body := &computepb.AccessConfig{Name: proto.String(externalNATName), Type: proto.String(oneToOneNAT)}
			if err := p.accessConfigOp(ctx, api, zone, name, "addAccessConfig", "", func() (*computepb.Operation, error) {
				return api.AddAccessConfig(ctx, zone, name, nic, body)
			}); err != nil {
				return reclassify(err, provider.ErrTransient, "the egress address moved; giving instance "+id+" an ephemeral address back")
			}
			log.V(1).Info("gcp ephemeral address given back to the instance that gave the egress address up", "instance", id)
		}
		p.mu.Lock()
		delete(p.owedEphemeral, id)
		p.mu.Unlock()
	}
	return nil
}

// accessConfigOp submits one access config change on an instance and
// follows its operation to the end. target, when set, is the instance's
// path, so that its 404 is NotFound (toID gone); without it (a holder) a
// 404 is success: a holder that is gone has released the address.
func (p *Provider) accessConfigOp(ctx context.Context, api computeAPI, zone, name, verb, target string, submit func() (*computepb.Operation, error)) error {
	log := logr.FromContextOrDiscard(ctx)
	id := formatID(zone, name)
	what := verb + " on instance " + id
	began := time.Now()
	op, err := submit()
	if err != nil {
		if target == "" && isNotFound(err) {
			log.V(1).Info("gcp egress address holder gone; nothing to release", "instance", id)
			return nil
		}
		return classify(err, call{what: what, target: target})
	}
	if op, err = waitZoneOp(ctx, api, zone, op, what); err != nil {
		return reclassify(err, notFoundIsTransient(err), "following "+what)
	}
	if err := opError(op, what); err != nil {
		if ipTakenMeanwhile(op) {
			return reclassify(err, provider.ErrTransient, "the egress address was taken meanwhile")
		}
		return err
	}
	log.V(1).Info("gcp egress address "+verb+" done", "instance", id, "operation", op.GetName(),
		"seconds", fmt.Sprintf("%.3f", time.Since(began).Seconds()))
	return nil
}

// nicOf is an instance's first network interface, or nil.
func nicOf(in *computepb.Instance) *computepb.NetworkInterface {
	if nics := in.GetNetworkInterfaces(); len(nics) > 0 {
		return nics[0]
	}
	return nil
}

// ---- secondary resources ----

// addressFilter selects this installation's reserved addresses that go
// with their Proxy: the marks and reclaimDelete.
func (p *Provider) addressFilter() string {
	return p.ourFilter() + fmt.Sprintf(` AND (labels.%s = "%s")`, markReclaim, reclaimDelete)
}

// listAddressSecondaries lists the reserved addresses the collector may delete:
// this installation's marks, reclaim delete (checked again here, so a
// filter an endpoint ignored cannot reach the collector). A region that
// answers with a warning is left out: the collector deletes only what it
// saw. The address belongs to its Proxy, not to an instance: Instance is
// empty, and InstanceGone true, so the collector asks whether a Proxy has
// its UID.
func (p *Provider) listAddressSecondaries(ctx context.Context, api computeAPI) ([]provider.Secondary, error) {
	var out []provider.Secondary
	var leftOut []string
	err := api.ListAddresses(ctx, p.addressFilter(), func(scope string, part *computepb.AddressesScopedList) {
		if w := part.GetWarning(); w != nil && w.GetCode() != warningNoResults {
			leftOut = append(leftOut, scope)
			return
		}
		region := lastSegment(scope)
		if !strings.HasPrefix(scope, "regions/") || !regionName.MatchString(region) {
			return // global addresses are never ours
		}
		for _, a := range part.GetAddresses() {
			m := provider.MarksFromLabels(a.GetLabels())
			if !m.Managed || m.Installation != p.opts.InstallationID || a.GetLabels()[markReclaim] != reclaimDelete {
				continue
			}
			s := provider.Secondary{
				ID: formatAddressID(region, a.GetName(), a.GetId()), Kind: kindAddress, Marks: m, InstanceGone: true,
			}
			s.CreatedAt, _ = createdAt(a.GetCreationTimestamp())
			out = append(out, s)
		}
	})
	if err != nil {
		return nil, classify(err, call{what: "listing addresses"})
	}
	if len(leftOut) > 0 {
		logr.FromContextOrDiscard(ctx).Info("gcp regions left out of the address listing: they answered with a warning", "scopes", leftOut)
		provider.Note(ctx, "addressScopesLeftOut", strings.Join(leftOut, ","))
	}
	return out, nil
}

// deleteAddressSecondary deletes a reserved address the collector judged
// orphaned, only while it is still the one listed (its numeric ID), ours
// and not retained. Gone is done; one an instance holds is Transient (it
// is deleted once that instance is gone).
func (p *Provider) deleteAddressSecondary(ctx context.Context, id string) error {
	region, name, addrID, err := parseAddressID(id)
	if err != nil {
		return err
	}
	ctx = httpobserve.WithOp(ctx, provider.OpDeleteSecondary)
	ctx, cancel := context.WithTimeout(ctx, foregroundBound)
	defer cancel()
	api, err := p.client()
	if err != nil {
		return err
	}
	path := p.addressPath(region, name)
	a, err := p.readAddress(ctx, api, region, name)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	m := provider.MarksFromLabels(a.GetLabels())
	if a.GetId() != addrID || !m.Managed || m.Installation != p.opts.InstallationID || a.GetLabels()[markReclaim] != reclaimDelete {
		return nil // reserved again since, not ours, or retained now: counts as deleted
	}
	inUse := func() error {
		return provider.Errorf(provider.ErrTransient, "egress address %s is in use by %s; it is deleted once its instance is gone",
			path, strings.Join(trimURLs(a.GetUsers()), ", "))
	}
	if a.GetStatus() == "IN_USE" {
		return inUse()
	}
	what := "deleting egress address " + path
	op, err := api.DeleteAddress(ctx, region, name)
	if err != nil {
		var gerr *googleapi.Error
		switch {
		case isNotFound(err):
			return nil
		case errors.As(err, &gerr) && gerr.Code == http.StatusBadRequest && hasReason(gerr, reasonInUse):
			return inUse()
		}
		return classify(err, call{what: what})
	}
	wctx, wcancel := context.WithTimeout(ctx, foregroundAddressWait)
	defer wcancel()
	if op, err = waitRegionOp(wctx, api, region, op, what); err != nil {
		if wctx.Err() != nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("gcp egress address delete submitted; not waited for to the end", "address", path)
			return nil
		}
		return err
	}
	if err := opError(op, what); err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("gcp orphaned egress address deleted", "address", path, "ip", a.GetAddress())
	return nil
}

func trimURLs(links []string) []string {
	out := make([]string, len(links))
	for i, l := range links {
		out[i] = trimURL(l)
	}
	return out
}
