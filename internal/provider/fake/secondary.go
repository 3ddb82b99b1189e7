package fake

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The fake's secondary resources: objects a VM provider keeps beside an
// instance (an overlay volume, a seed ISO, a firewall rule), one per kind
// and instance name. Create makes none; a test plants them, as a crash
// between a provider's steps would leave them, and the fake lists and
// deletes them as the contract's SecondaryLister says.

var _ provider.SecondaryLister = (*Provider)(nil)

// secondaryPrefix starts every secondary ID:
// "fake-secondary/<kind>/<instance name>/<serial>". The serial names the
// exact object, as a backend's object UID does: a resource planted again
// under the same kind and instance gets a new ID.
const secondaryPrefix = "fake-secondary/"

// SecondaryRecord is one secondary resource as the backend holds it.
type SecondaryRecord struct {
	// ID is what ListSecondary reports and DeleteSecondary takes.
	ID   string
	Kind string
	// Instance is the name of the instance it belongs to.
	Instance string
	// Marks is nil for a resource with no marks at all.
	Marks     *provider.Marks
	CreatedAt time.Time
}

// secondaryKey is a resource's place on the backend: one per kind and
// instance.
type secondaryKey struct{ kind, instance string }

// secondaryRecords is the provider's record of its secondary calls.
type secondaryRecords struct {
	deleted []string
}

// PlantSecondary makes a secondary resource of kind for the instance named
// instance (which need not exist) with the given marks (nil: none),
// replacing any of that kind and instance, and returns it. Its CreatedAt
// comes from the backend's clock.
func (b *Backend) PlantSecondary(kind, instance string, marks *provider.Marks) SecondaryRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.secondaries == nil {
		b.secondaries = map[secondaryKey]*SecondaryRecord{}
	}
	b.secondarySerial++
	r := &SecondaryRecord{
		ID:   secondaryPrefix + kind + "/" + instance + "/" + strconv.FormatUint(b.secondarySerial, 10),
		Kind: kind, Instance: instance, Marks: copyMarks(marks), CreatedAt: b.now(),
	}
	b.secondaries[secondaryKey{kind, instance}] = r
	return r.snapshot()
}

// LookupSecondary returns the secondary resource of kind for instance,
// whoever owns it.
func (b *Backend) LookupSecondary(kind, instance string) (SecondaryRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.secondaries[secondaryKey{kind, instance}]
	if !ok {
		return SecondaryRecord{}, false
	}
	return r.snapshot(), true
}

// RemoveSecondary deletes the secondary resource of kind for instance
// behind the providers' backs and reports whether it existed.
func (b *Backend) RemoveSecondary(kind, instance string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := secondaryKey{kind, instance}
	_, ok := b.secondaries[k]
	delete(b.secondaries, k)
	return ok
}

// Secondaries returns every secondary resource, whoever owns it, sorted by
// ID.
func (b *Backend) Secondaries() []SecondaryRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.secondariesLocked()
}

func (b *Backend) secondariesLocked() []SecondaryRecord {
	out := make([]SecondaryRecord, 0, len(b.secondaries))
	for _, r := range b.secondaries {
		out = append(out, r.snapshot())
	}
	slices.SortFunc(out, func(x, y SecondaryRecord) int { return strings.Compare(x.ID, y.ID) })
	return out
}

func (r *SecondaryRecord) snapshot() SecondaryRecord {
	c := *r
	c.Marks = copyMarks(r.Marks)
	return c
}

// ours reports whether the resource carries the managed mark and this
// installation's identity.
func (r *SecondaryRecord) ours(installation string) bool {
	return r.Marks != nil && r.Marks.Managed && r.Marks.Installation == installation
}

// String keeps %v of a SecondaryRecord readable in test failures.
func (r SecondaryRecord) String() string {
	marks := "unmarked"
	if r.Marks != nil {
		marks = fmt.Sprintf("%+v", *r.Marks)
	}
	return fmt.Sprintf("%s{%s created=%s}", r.ID, marks, r.CreatedAt.Format(time.RFC3339))
}

// DeletedSecondaries returns every ID DeleteSecondary received, in order,
// failed calls included.
func (p *Provider) DeletedSecondaries() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.secondary.deleted)
}

// ListSecondary returns this installation's marked secondary resources,
// sorted by ID, each with InstanceGone set when no instance of its name is
// on the backend at all: one that exists but is not ours (a human's, or
// one whose marks were stripped) may still use it, so it is not gone.
func (p *Provider) ListSecondary(ctx context.Context) ([]provider.Secondary, error) {
	log := p.log(ctx)
	if err := p.enter(ctx, provider.OpListSecondary); err != nil {
		log.V(1).Info("fake secondary list failed", "error", err.Error())
		return nil, err
	}
	b := p.backend
	b.mu.Lock()
	var out []provider.Secondary
	for _, r := range b.secondariesLocked() {
		if !r.ours(p.installation) {
			continue
		}
		_, exists := b.instances[r.Instance]
		out = append(out, provider.Secondary{
			ID: r.ID, Kind: r.Kind, Marks: *r.Marks, Instance: r.Instance, InstanceID: ID(r.Instance),
			InstanceGone: !exists, CreatedAt: r.CreatedAt,
		})
	}
	b.mu.Unlock()
	log.V(1).Info("fake secondaries listed", "count", len(out))
	return out, nil
}

// DeleteSecondary removes our secondary resource with exactly this ID; one
// that is gone, recreated since (another ID) or not ours is left alone and
// the call succeeds. A malformed ID is Permanent.
func (p *Provider) DeleteSecondary(ctx context.Context, id string) error {
	p.mu.Lock()
	p.secondary.deleted = append(p.secondary.deleted, id)
	p.mu.Unlock()
	log := p.log(ctx).WithValues("id", id)
	if err := p.enter(ctx, provider.OpDeleteSecondary); err != nil {
		log.V(1).Info("fake secondary delete failed", "error", err.Error())
		return err
	}
	k, err := parseSecondaryID(id)
	if err != nil {
		return p.fail(provider.OpDeleteSecondary, nil, err)
	}
	b := p.backend
	b.mu.Lock()
	outcome := "already gone"
	if r, ok := b.secondaries[k]; ok {
		switch {
		case r.ID != id:
			outcome = "recreated since, left alone"
		case !r.ours(p.installation):
			outcome = "not ours, left alone"
		default:
			delete(b.secondaries, k)
			outcome = "deleted"
		}
	}
	b.mu.Unlock()
	log.V(1).Info("fake secondary delete", "outcome", outcome)
	return nil
}

// deleteSecondariesOf removes this installation's secondary resources of
// the instance named instance: Delete's explicit removal by name (profile
// secondary-resources: explicit).
func (b *Backend) deleteSecondariesOf(instance, installation string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, r := range b.secondaries {
		if k.instance == instance && r.ours(installation) {
			delete(b.secondaries, k)
		}
	}
}

// parseSecondaryID returns the kind and instance in id; a malformed ID is
// Permanent.
func parseSecondaryID(id string) (secondaryKey, error) {
	rest, ok := strings.CutPrefix(id, secondaryPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[0] == "" {
		return secondaryKey{}, provider.Errorf(provider.ErrPermanent, "malformed secondary id %q: want %s<kind>/<instance>/<serial>", id, secondaryPrefix)
	}
	if errs := validation.IsDNS1035Label(parts[1]); len(errs) > 0 {
		return secondaryKey{}, provider.Errorf(provider.ErrPermanent, "malformed secondary id %q: %s", id, strings.Join(errs, "; "))
	}
	if _, err := strconv.ParseUint(parts[2], 10, 64); err != nil {
		return secondaryKey{}, provider.Errorf(provider.ErrPermanent, "malformed secondary id %q: serial %q", id, parts[2])
	}
	return secondaryKey{parts[0], parts[1]}, nil
}
