package gcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/httpobserve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// Progress details of a create, in the order its step goes.
const (
	progressQueued   = "preparing the instance"
	progressFirewall = "creating the firewall rule"
	progressInsert   = "inserting the instance"
	progressRunning  = "insert operation running"
	progressStart    = "starting the stopped instance"
	progressResume   = "resuming the suspended instance"
	progressStopping = "waiting for the instance to stop before starting it again"
)

// maxUserData is GCE's limit for one metadata value (256 KB).
const maxUserData = 256 << 10

// plan is a Create request resolved against the config, before any call.
type plan struct {
	zone, region string
	// machineKey is what the Proxy (or the entry's default) named,
	// machineType the GCE machine type it stands for.
	machineKey, machineType string
	// imageKey is what the Proxy (or the default) named, image its path.
	imageKey string
	image    imageRef
	family   squid.Family
	// userData is the Proxy's cloud-init or the generated Squid
	// cloud-config.
	userData provider.Sensitive
	// ruleRanges are the IPv4 ranges the firewall rule admits, canonical
	// and sorted; empty: no rule.
	ruleRanges []string
	// natIP is the egress address the insert names (set by the create
	// step once the address is known); "": an ephemeral address.
	natIP, natTier string
}

// Create makes the instance named req.Name in the zone placement names,
// or adopts it. Everything that can be refused is refused before any call
// (placement, the cloud-config, the marks). Then, under the name's lock: a
// create step in flight is joined; an instance of ours that exists is
// adopted (the UID guard; an empty UID mark is filled in), its firewall
// rule kept in step, and a stopped one started, a suspended one resumed;
// otherwise the step runs in the background (createStep: the firewall
// rule, then the insert, with its operation followed to its end, so that
// an insert that fails after it was accepted reaches the next Create or
// Get with its class) and Create returns at once, Provisioning.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Instance, error) {
	pl, err := p.resolve(req)
	if err != nil {
		return provider.Instance{}, err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("zone", pl.zone, "name", req.Name)
	ctx = httpobserve.WithOp(logr.NewContext(ctx, log), provider.OpCreate)
	fg, cancel := context.WithTimeout(ctx, foregroundBound)
	defer cancel()
	log.V(2).Info("gcp create resolved", "machineType", pl.machineType, "image", pl.image.path, "family", pl.family,
		"addressMode", p.cfg.AddressMode, "ruleRanges", pl.ruleRanges, "userDataBytes", pl.userData.Len())

	unlock, err := p.names.Lock(fg, req.Name)
	if err != nil {
		return provider.Instance{}, provider.Errorf(provider.ErrTransient, "waiting for another call on instance %s: %w", req.Name, err)
	}
	defer unlock()
	id := formatID(pl.zone, req.Name)
	switch st := p.steps.Poll(req.Name); {
	case st.Err != nil:
		return provider.Instance{}, st.Err
	case st.Running:
		return provisioning(id, req.UID, st.Progress), nil
	}
	if p.deleting.Running(req.Name) {
		return provider.Instance{}, provider.Errorf(provider.ErrTransient, "instance %s is being deleted; it is created again once it is gone", req.Name)
	}
	api, err := p.client()
	if err != nil {
		return provider.Instance{}, err
	}
	p.noteRegion(pl.region)
	in, err := api.GetInstance(fg, pl.zone, req.Name)
	if err == nil {
		return p.adopt(fg, api, pl, req, in, p.now())
	}
	if err = classify(err, call{what: "reading instance " + id, target: p.instanceTarget(pl.zone, req.Name)}); !errors.Is(err, provider.ErrNotFound) {
		return provider.Instance{}, err
	}

	p.clearInsertFailure(req.Name)
	p.creating.Add(req.Name, creatingInstance{zone: pl.zone, uid: req.UID, since: p.now()})
	st, err := p.steps.Start(ctx, req.Name, progressQueued, func(ctx context.Context, progress func(string)) error {
		defer p.creating.Remove(req.Name)
		return p.createStep(httpobserve.WithOp(ctx, httpobserve.OpCreateStep), api, pl, req, progress)
	})
	if err != nil {
		p.creating.Remove(req.Name)
		return provider.Instance{}, err
	}
	if st.Err != nil {
		return provider.Instance{}, st.Err
	}
	if p.onStepStarted != nil && st.Running {
		p.onStepStarted(req.Name, st.Done)
	}
	log.V(1).Info("gcp create started in the background")
	return provisioning(id, req.UID, st.Progress), nil
}

// provisioning is an instance whose create step runs.
func provisioning(id, uid, progress string) provider.Instance {
	return provider.Instance{ID: id, UID: uid, State: provider.StateProvisioning, Progress: progress}
}

// instanceTarget is the path an instance's 404 names.
func (p *Provider) instanceTarget(zone, name string) string {
	return "projects/" + p.cfg.Project + "/zones/" + zone + "/instances/" + name
}

// adopt takes over the existing instance in named req.Name: only one with
// this installation's marks and req.UID (or no UID, which is filled in) is
// ours. Its firewall rule is kept in step (submitted, not waited for: the
// bound), and a stopped instance is started, a suspended one resumed.
// read is when in was read.
func (p *Provider) adopt(ctx context.Context, api computeAPI, pl plan, req provider.CreateRequest, in *computepb.Instance, read time.Time) (provider.Instance, error) {
	log := logr.FromContextOrDiscard(ctx)
	marks := provider.MarksFromLabels(in.GetLabels())
	if err := provider.AdoptionError(provider.CheckAdoption(marks, p.opts.InstallationID, req.UID), req.Name); err != nil {
		return provider.Instance{}, err
	}
	provider.Note(ctx, "outcome", "adopted")
	if marks.UID == "" {
		labels := instanceLabels(in.GetLabels(), provider.Marks{Managed: true, UID: req.UID, Installation: p.opts.InstallationID})
		if _, err := api.SetInstanceLabels(ctx, pl.zone, req.Name, labels, in.GetLabelFingerprint()); err != nil {
			return provider.Instance{}, classify(err, call{what: "writing the UID mark of instance " + req.Name})
		}
		log.V(1).Info("gcp instance adopted with an empty UID mark; mark filled in")
		in.Labels = labels
	}
	if p.cfg.managesFirewall() {
		if err := p.ensureRule(ctx, api, pl, req, false); err != nil {
			return provider.Instance{}, err
		}
	}
	id := formatID(pl.zone, req.Name)
	var progress string
	var err error
	switch in.GetStatus() {
	case "TERMINATED", "STOPPED":
		progress = progressStart
		_, err = api.StartInstance(ctx, pl.zone, req.Name)
	case "SUSPENDED":
		progress = progressResume
		_, err = api.ResumeInstance(ctx, pl.zone, req.Name)
	case "STOPPING", "SUSPENDING", "DEPROVISIONING":
		// Neither start nor resume takes an instance on its way down: the
		// reconciler reads it Stopped next and calls Create again.
		return provisioning(id, req.UID, progressStopping), nil
	default:
		inst := p.describe(in, pl.zone)
		inst.UID = req.UID
		// A running instance adopted is read as Get reads it: Ready from
		// here needs its proxy to answer too.
		if err := p.applyServing(ctx, api, in, &inst, read); err != nil {
			return provider.Instance{}, err
		}
		return inst, nil
	}
	if err != nil {
		return provider.Instance{}, classify(err, call{what: progress + " " + req.Name})
	}
	log.V(1).Info("gcp instance of ours was "+in.GetStatus()+"; "+progress, "status", in.GetStatus())
	return provisioning(id, req.UID, progress), nil
}

// createStep is the slow part of a create, run in the background: the
// firewall rule (waited for: the rule must be there before the instance
// can take traffic), the insert under a request ID derived from the
// instance, so an insert retried after a lost answer is the same insert,
// and its operation followed to its end. The operation's error is read from
// the operation itself (the SDK's Wait returns nil when only error is set)
// and classified: ZONE_RESOURCE_POOL_EXHAUSTED and QUOTA_EXCEEDED are
// QuotaExceeded, a bad image or machine type Permanent. A failed insert
// leaves no instance, and the next insert uses the next request ID.
func (p *Provider) createStep(ctx context.Context, api computeAPI, pl plan, req provider.CreateRequest, progress func(string)) error {
	log := logr.FromContextOrDiscard(ctx)
	if req.EgressAddress != nil {
		// First: the step most likely refused (the address another's),
		// which then leaves no rule behind.
		a, err := p.ensureEgressAddress(ctx, api, pl, req, progress)
		if err != nil {
			return reclassify(err, notFoundIsTransient(err), "egress address of instance "+req.Name)
		}
		pl.natIP, pl.natTier = a.GetAddress(), a.GetNetworkTier()
	}
	if p.cfg.managesFirewall() {
		progress(progressFirewall)
		if err := p.ensureRule(ctx, api, pl, req, true); err != nil {
			return reclassify(err, notFoundIsTransient(err), "firewall rule of instance "+req.Name)
		}
	}
	progress(progressInsert)
	body := p.buildInstance(pl, req)
	attempt := p.insertAttempt(req.Name)
	requestID := insertRequestID(p.opts.InstallationID, p.cfg.Project, pl.zone, req.Name, req.UID, attempt)
	log.V(2).Info("gcp insert request", "request", describeInsert(body), "requestId", requestID, "attempt", attempt)
	// Cancelled from here on, the step leaves its insert to Delete: the
	// API may have accepted it, and keeps making the instance.
	p.sentInserts.Add(req.Name, sentInsert{body: body, requestID: requestID})
	defer func() {
		if ctx.Err() == nil {
			p.sentInserts.Remove(req.Name)
		}
	}()
	op, err := api.InsertInstance(ctx, pl.zone, body, requestID)
	if err != nil {
		if isAlreadyExists(err) {
			return p.insertedMeanwhile(ctx, api, pl, req)
		}
		return insertError(err, pl, req.Name)
	}
	// A new insert answers with an operation that runs; one answered done
	// at once is an earlier insert's, found by its request ID (GCE keeps
	// them an hour), whose instance may be gone since: an instance lost
	// and made again under its name.
	replayed := op.GetStatus() == computepb.Operation_DONE
	log.V(1).Info("gcp insert submitted", "operation", op.GetName(), "requestId", requestID)
	progress(progressRunning)
	what := "insert of instance " + formatID(pl.zone, req.Name)
	op, err = waitZoneOp(ctx, api, pl.zone, op, what)
	if err != nil {
		return reclassify(err, notFoundIsTransient(err), "following the insert of instance "+req.Name)
	}
	if err := opError(op, what); err != nil {
		if pl.natIP != "" && ipTakenMeanwhile(op) {
			// Another resource took the egress address since the step read
			// it free: the next Create reads who has it.
			err = reclassify(err, provider.ErrTransient, "the egress address was taken meanwhile")
		}
		p.insertFailed(req.Name, err)
		log.V(1).Info("gcp insert failed after it was accepted", "operation", op.GetName(), "codes", opCodes(op),
			"httpErrorStatusCode", op.GetHttpErrorStatusCode(), "class", provider.ClassName(err))
		return err
	}
	if replayed {
		if _, err := api.GetInstance(ctx, pl.zone, req.Name); err != nil {
			err = classify(err, call{what: "reading instance " + req.Name, target: p.instanceTarget(pl.zone, req.Name)})
			if !errors.Is(err, provider.ErrNotFound) {
				return reclassify(err, notFoundIsTransient(err), "reading the instance an earlier insert made")
			}
			// Without this the insert would replay that operation, and
			// make nothing, for as long as GCE remembers its request ID.
			p.nextInsertAttempt(req.Name)
			log.V(1).Info("gcp insert answered with an earlier insert's operation, whose instance is gone; the next insert is a new one",
				"operation", op.GetName(), "requestId", requestID)
			return provider.Errorf(provider.ErrTransient,
				"instance %s: the insert's request ID is an earlier insert's (operation %s), whose instance is gone since; inserting it anew under a new request ID",
				formatID(pl.zone, req.Name), op.GetName())
		}
	}
	p.forgetInsert(req.Name)
	log.V(1).Info("gcp insert done", "operation", op.GetName())
	return nil
}

// sentInsert is an insert a create step sent. Sent again under its request
// ID it is the same insert: the API answers with its operation.
type sentInsert struct {
	body      *computepb.Instance
	requestID string
}

// notFoundIsTransient keeps a step's class but never NotFound: the
// reconciler would read a step's NotFound as "the instance is gone".
func notFoundIsTransient(err error) error {
	if c := provider.ClassOf(err); c != provider.ErrNotFound {
		return c
	}
	return provider.ErrTransient
}

// insertedMeanwhile handles an insert answered 409: an instance under the
// name exists (made since Create read it, adopted by the next Create when
// it is ours) or is being inserted by a request whose ID is not ours (a
// step from before a restart, after a failed attempt): the name is held
// until that operation ends, and the next Create tries again.
func (p *Provider) insertedMeanwhile(ctx context.Context, api computeAPI, pl plan, req provider.CreateRequest) error {
	in, err := api.GetInstance(ctx, pl.zone, req.Name)
	if err != nil {
		err = classify(err, call{what: "reading instance " + req.Name, target: p.instanceTarget(pl.zone, req.Name)})
		if errors.Is(err, provider.ErrNotFound) {
			return provider.Errorf(provider.ErrTransient,
				"instance %s: the name is taken (409) while no instance is there: an earlier insert of it is still running; tried again", req.Name)
		}
		return err
	}
	return provider.AdoptionError(provider.CheckAdoption(provider.MarksFromLabels(in.GetLabels()), p.opts.InstallationID, req.UID), req.Name)
}

// insertError classifies a refused insert, naming the placement field the
// API's answer is about.
func insertError(err error, pl plan, name string) error {
	err = classify(err, call{what: "inserting instance " + formatID(pl.zone, name)})
	if !errors.Is(err, provider.ErrPermanent) {
		return reclassify(err, notFoundIsTransient(err), "inserting instance "+name)
	}
	msg := errText(err)
	var hint string
	switch {
	case strings.Contains(msg, "machineType") || strings.Contains(msg, "Machine type"):
		hint = fmt.Sprintf("placement.machineType %q (GCE machine type %s in zone %s)", pl.machineKey, pl.machineType, pl.zone)
	case strings.Contains(msg, "sourceImage") || strings.Contains(msg, "/images/"):
		hint = fmt.Sprintf("placement.image %q (%s)", pl.imageKey, pl.image.path)
	case strings.Contains(msg, "'zone'") || strings.Contains(msg, "zones/"+pl.zone+"'"):
		hint = fmt.Sprintf("placement.zone %q", pl.zone)
	case strings.Contains(msg, "network"):
		hint = "the entry's network or subnetwork"
	}
	if hint == "" {
		return err
	}
	return provider.Errorf(provider.ErrPermanent, "%s refused: %s", hint, msg)
}

// insertRequestID is the insert's request ID: a UUID (version 8, RFC 9562)
// from the installation, the instance's place and name, the Proxy's UID and
// the attempt, so that an insert repeated after a lost answer (or after a
// restart, while the API still remembers it) is the same insert, and one
// after a failed operation is a new one.
func insertRequestID(installation, project, zone, name, uid string, attempt int) string {
	return requestID("insert", installation, project, zone, name, uid, fmt.Sprint(attempt))
}

// deleteRequestID is the delete's: one per instance (its numeric ID tells
// an instance made again under the name apart) and attempt, so that a
// Delete after a restart meets the delete already running instead of
// starting a second one (overlapping deletes draw 403 rateLimitExceeded).
func deleteRequestID(installation, project, zone, name string, instanceID uint64, attempt int) string {
	return requestID("delete", installation, project, zone, name, fmt.Sprint(instanceID), fmt.Sprint(attempt))
}

func requestID(parts ...string) string {
	sum := sha256.Sum256([]byte("egress-proxies-operator\x00" + strings.Join(parts, "\x00")))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // variant 10
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// buildInstance is the insert body: pure, so the tests read it whole.
func (p *Provider) buildInstance(pl plan, req provider.CreateRequest) *computepb.Instance {
	nic := &computepb.NetworkInterface{Network: proto.String(p.netPath)}
	if p.sub != nil {
		nic.Subnetwork = proto.String(p.sub.path(p.cfg.Project, pl.region))
	}
	if p.cfg.AddressMode == AddressExternal {
		ac := &computepb.AccessConfig{Name: proto.String(externalNATName), Type: proto.String(oneToOneNAT)}
		if pl.natIP != "" {
			// The address's tier: an access config of another tier is
			// refused.
			ac.NatIP = proto.String(pl.natIP)
			if pl.natTier != "" {
				ac.NetworkTier = proto.String(pl.natTier)
			}
		}
		nic.AccessConfigs = []*computepb.AccessConfig{ac}
	}
	in := &computepb.Instance{
		Name:        proto.String(req.Name),
		Description: proto.String(fmt.Sprintf("Egress proxy of Proxy %s/%s (egress-proxies-operator)", req.Namespace, req.ProxyName)),
		MachineType: proto.String("zones/" + pl.zone + "/machineTypes/" + pl.machineType),
		Labels:      instanceLabels(p.cfg.Labels, provider.Marks{Managed: true, UID: req.UID, Installation: p.opts.InstallationID}),
		Tags:        &computepb.Tags{Items: []string{p.cfg.NetworkTagPrefix, instanceTag(p.cfg.NetworkTagPrefix, req.Name)}},
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true), Type: proto.String("PERSISTENT"),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String(pl.image.path),
				DiskSizeGb:  proto.Int64(p.cfg.DiskSizeGB),
				DiskType:    proto.String("zones/" + pl.zone + "/diskTypes/" + p.cfg.DiskType),
			},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{nic},
		// The startup script installs the serving reporter (serving.go),
		// which writes its guest attribute; neither value is secret, and
		// the log lines and the fake's request log show only lengths.
		Metadata: &computepb.Metadata{Items: []*computepb.Items{
			{Key: proto.String(metaUserData), Value: proto.String(pl.userData.Reveal())},
			{Key: proto.String(metaGuestAttributes), Value: proto.String("TRUE")},
			{Key: proto.String(metaStartupScript), Value: proto.String(startupScript(req.Port, p.dest.Echo()))},
		}},
	}
	if p.cfg.ServiceAccount != "" {
		in.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(p.cfg.ServiceAccount), Scopes: slices.Clone(p.cfg.Scopes)}}
	}
	return in
}

// describeInsert is the insert body for a V(2) line: everything but the
// metadata values (the user-data).
func describeInsert(in *computepb.Instance) map[string]any {
	nic := in.GetNetworkInterfaces()[0]
	var meta []string
	for _, it := range in.GetMetadata().GetItems() {
		meta = append(meta, fmt.Sprintf("%s (%d bytes)", it.GetKey(), len(it.GetValue())))
	}
	return map[string]any{
		"name": in.GetName(), "machineType": in.GetMachineType(), "labels": in.GetLabels(), "tags": in.GetTags().GetItems(),
		"image": in.GetDisks()[0].GetInitializeParams().GetSourceImage(), "diskSizeGb": in.GetDisks()[0].GetInitializeParams().GetDiskSizeGb(),
		"diskType": in.GetDisks()[0].GetInitializeParams().GetDiskType(), "network": nic.GetNetwork(), "subnetwork": nic.GetSubnetwork(),
		"externalIP": len(nic.GetAccessConfigs()) > 0, "natIP": natIPOf(nic), "serviceAccounts": len(in.GetServiceAccounts()), "metadata": meta,
	}
}

func natIPOf(nic *computepb.NetworkInterface) string {
	if acs := nic.GetAccessConfigs(); len(acs) > 0 {
		return acs[0].GetNatIP()
	}
	return ""
}

// resolve checks a request against the config without any call: the zone
// (and region), the machine type, the image, the ranges, the marks, and
// renders the user-data. Every refusal is Permanent and names the field.
func (p *Provider) resolve(req provider.CreateRequest) (plan, error) {
	var pl plan
	var err error
	if !gceName.MatchString(req.Name) {
		return plan{}, provider.Errorf(provider.ErrPermanent, "instance name %q is not a GCE resource name", req.Name)
	}
	if req.Port < 1 || req.Port > 65535 {
		return plan{}, provider.Errorf(provider.ErrPermanent, "port %d is not a TCP port", req.Port)
	}
	if err := checkLabelValue("the Proxy's UID", req.UID); err != nil {
		return plan{}, err
	}
	if err := checkLabelValue("the installation ID", p.opts.InstallationID); err != nil {
		return plan{}, err
	}
	if err := p.checkEgressAddress(req.EgressAddress); err != nil {
		return plan{}, err
	}
	if pl.zone, err = p.placeZone(req.Placement); err != nil {
		return plan{}, err
	}
	pl.region = regionOf(pl.zone)
	if p.sub != nil && p.sub.region != "" && p.sub.region != pl.region {
		return plan{}, provider.Errorf(provider.ErrPermanent,
			"placement.zone %q is in region %s, but the entry's subnetwork is in region %s", pl.zone, pl.region, p.sub.region)
	}
	if pl.machineKey, pl.machineType, err = p.placeMachineType(req.Placement.MachineType); err != nil {
		return plan{}, err
	}
	if err := p.placeImage(&pl, req); err != nil {
		return plan{}, err
	}
	prefixes, errs := egress.ParseClients(req.AllowedSourceRanges)
	if len(errs) > 0 {
		return plan{}, provider.Errorf(provider.ErrPermanent, "%s", errs.ToAggregate().Error())
	}
	for _, pfx := range prefixes {
		if pfx.Addr().Is4() {
			pl.ruleRanges = append(pl.ruleRanges, pfx.String())
		}
	}
	slices.Sort(pl.ruleRanges)
	pl.ruleRanges = slices.Compact(pl.ruleRanges)
	if pl.userData, err = squid.UserData(req, p.dest, pl.family, ""); err != nil {
		return plan{}, err
	}
	if pl.userData.Len() > maxUserData {
		return plan{}, provider.Errorf(provider.ErrPermanent, "cloudInit is %d bytes; a GCE metadata value holds at most %d", pl.userData.Len(), maxUserData)
	}
	return pl, nil
}

// placeZone resolves placement.zone and placement.region (the earlier providers
// ignored the region): a zone must be one of the entry's zones when it
// lists any, and in the region when one is named; a region alone picks the
// entry's default zone when it is in that region, else the first listed
// zone there.
func (p *Provider) placeZone(pm provider.Placement) (string, error) {
	zone, region := pm.Zone, pm.Region
	if region != "" && !regionName.MatchString(region) {
		return "", provider.Errorf(provider.ErrPermanent, "placement.region %q is not a region name such as us-central1", region)
	}
	if zone == "" {
		switch {
		case region == "" && p.cfg.DefaultZone != "":
			return p.cfg.DefaultZone, nil
		case region == "":
			return "", provider.Errorf(provider.ErrPermanent, "placement.zone is required: this entry has no defaultZone%s", p.zonesPhrase())
		case p.cfg.DefaultZone != "" && regionOf(p.cfg.DefaultZone) == region:
			return p.cfg.DefaultZone, nil
		}
		for _, z := range p.cfg.Zones {
			if regionOf(z) == region {
				return z, nil
			}
		}
		return "", provider.Errorf(provider.ErrPermanent,
			"placement.zone is required: placement.region %q alone names no zone (this entry lists none in it%s)", region, p.zonesPhrase())
	}
	if !zoneName.MatchString(zone) {
		return "", provider.Errorf(provider.ErrPermanent, "placement.zone %q is not a zone name such as us-central1-a", zone)
	}
	if len(p.cfg.Zones) > 0 && !slices.Contains(p.cfg.Zones, zone) {
		return "", provider.Errorf(provider.ErrPermanent, "placement.zone %q is not one of this entry's zones%s", zone, p.zonesPhrase())
	}
	if region != "" && regionOf(zone) != region {
		return "", provider.Errorf(provider.ErrPermanent, "placement.zone %q is not in placement.region %q", zone, region)
	}
	return zone, nil
}

func (p *Provider) zonesPhrase() string {
	if len(p.cfg.Zones) == 0 {
		return ""
	}
	return " (" + strings.Join(p.cfg.Zones, ", ") + ")"
}

// placeMachineType resolves placement.machineType: a catalogue key, or
// without a catalogue a GCE machine type name.
func (p *Provider) placeMachineType(key string) (string, string, error) {
	if key == "" {
		key = p.cfg.DefaultMachineType
	}
	if len(p.cfg.MachineTypes) > 0 {
		mt, ok := p.cfg.MachineTypes[key]
		switch {
		case key == "":
			return "", "", provider.Errorf(provider.ErrPermanent, "placement.machineType is required: this entry has several machine types (%s) and no defaultMachineType",
				strings.Join(config.SortedKeys(p.cfg.MachineTypes), ", "))
		case !ok:
			return "", "", provider.Errorf(provider.ErrPermanent, "placement.machineType %q is not in this entry's machineTypes (%s)",
				key, strings.Join(config.SortedKeys(p.cfg.MachineTypes), ", "))
		}
		return key, mt, nil
	}
	if !gceName.MatchString(key) {
		return "", "", provider.Errorf(provider.ErrPermanent, "placement.machineType %q is not a GCE machine type name such as e2-small", key)
	}
	return key, key, nil
}

// placeImage resolves placement.image (a catalogue key, or without a
// catalogue an image path) and the distribution family, and refuses an
// image whose guest cannot run the instance's user-data.
func (p *Provider) placeImage(pl *plan, req provider.CreateRequest) error {
	key := req.Placement.Image
	if key == "" {
		key = p.cfg.DefaultImage
	}
	pl.imageKey = key
	var family string
	if len(p.cfg.Images) > 0 {
		img, ok := p.cfg.Images[key]
		switch {
		case key == "":
			return provider.Errorf(provider.ErrPermanent, "placement.image is required: this entry has several images (%s) and no defaultImage",
				strings.Join(config.SortedKeys(p.cfg.Images), ", "))
		case !ok:
			return provider.Errorf(provider.ErrPermanent, "placement.image %q is not in this entry's images (%s)", key, strings.Join(config.SortedKeys(p.cfg.Images), ", "))
		}
		pl.image, _ = parseImage(img.Image) // Validate proved it
		family = img.Family
	} else {
		ref, err := parseImage(key)
		if err != nil {
			return provider.Errorf(provider.ErrPermanent, "placement.image %q: %v", key, err)
		}
		pl.image = ref
	}
	guess, generated, readsUserData := imageSupport(pl.image.project)
	if !readsUserData {
		return provider.Errorf(provider.ErrPermanent,
			"placement.image %q: images of project %s do not run cloud-init, so the instance would never read its user-data; use an image with cloud-init such as %s",
			key, pl.image.project, DefaultImage)
	}
	if family != "" {
		pl.family, _ = squid.ParseFamily(family) // Validate proved it
		return nil
	}
	if !generated && req.CloudInit.Len() == 0 {
		return provider.Errorf(provider.ErrPermanent,
			"placement.image %q: images of project %s have no package manager, so the generated Squid cloud-config cannot install Squid; give the Proxy its own cloudInit, or use an image such as %s",
			key, pl.image.project, DefaultImage)
	}
	pl.family = guess
	return nil
}

// imageSupport says, for an image project, the distribution family the
// generated cloud-config assumes, whether that cloud-config can run there,
// and whether the guest reads user-data at all. Google's Debian images
// (debian-cloud) ship the guest agent and no cloud-init (their package
// lists, docs/gcp-provider.md), Fedora CoreOS reads Ignition;
// Container-Optimized OS runs cloud-init but has no package manager.
func imageSupport(project string) (family squid.Family, generated, readsUserData bool) {
	switch project {
	case "debian-cloud", "fedora-coreos-cloud":
		return "", false, false
	case "cos-cloud":
		return squid.FamilyDebian, false, true
	case "rhel-cloud", "rhel-sap-cloud", "centos-cloud", "rocky-linux-cloud", "almalinux-cloud", "fedora-cloud", "oracle-linux-cloud":
		return squid.FamilyRHEL, true, true
	}
	return squid.FamilyDebian, true, true
}
