// Package descriptor is what a provider package tells the rest of the
// program about its provider type, in one value: the names the providers
// config's `type` field takes, how to read its config block and build the
// provider, how often to poll, its profile and its guide. Each provider
// package exports one (func Descriptor); registry.Descriptors lists them,
// and the registry, docs/providers.md (hack/providers-doc) and the tests
// read that list only (docs/provider-contract.md, "Adding a provider").
//
// It sits below the registry, beside the contract: a provider imports it,
// never the registry.
package descriptor

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/profile"
)

// Descriptor is everything the program needs about one provider package.
type Descriptor struct {
	// TypeNames are the names the providers config's `type` field takes
	// for this package (the registry's keys): one, or kvm and kvm2 for the
	// one libvirt implementation.
	TypeNames []string
	// Type is how the registry builds a provider of any of TypeNames.
	Type Type
	// Profile is the type's pick on the contract's axes and the compared
	// rows of docs/providers.md.
	Profile profile.Profile
	// Guide is the page that describes the type in full, relative to
	// docs/, with an optional #anchor.
	Guide string
	// Components are the kustomize components under config/components
	// that grant the type's RBAC in the operator's cluster; none when it
	// needs none.
	Components []string
}

// Type is one provider type as the registry builds it: how to read its
// config block and how to build a provider from it.
type Type struct {
	// Parse decodes the entry's <type> block strictly, fills the defaults
	// and validates; errors are under path. raw is nil when the entry has
	// no block. On reload an entry whose settings are reflect.DeepEqual to
	// the running ones is kept as it is, however the block is written.
	Parse func(raw json.RawMessage, path *field.Path) (any, field.ErrorList)
	// New builds the provider from what Parse returned, and from nothing
	// else, so equal settings make an equal provider. It must not reach the
	// backend: a backend that is down at start must not stop the operator
	// (the health loop reports it instead). The provider need not log its
	// outcomes or name its errors: the registry puts it behind
	// provider.WithBoundary.
	New func(name string, settings any, opts provider.Options) (provider.Provider, error)
	// PollInterval is how often the reconciler reads an instance that is
	// still provisioning: seconds for Pods, longer for VMs that boot.
	PollInterval time.Duration
	// AddressPools: the provider renders CreateRequest.StaticAddress into
	// its instances' network configuration, so its entries may have an
	// addressPool. Set from the profile's static-address axis
	// (registry.DefaultTypes), never by hand.
	AddressPools bool
	// ProviderType is the Go type New returns (TypeOf sets it), so tests
	// read what the provider implements and where its package is without
	// a list of their own; nil for a Type built by hand.
	ProviderType reflect.Type
}

// TypeOf adapts a typed parser and constructor to Type, so each provider
// package keeps its own config type.
func TypeOf[C any, P provider.Provider](
	parse func(json.RawMessage, *field.Path) (C, field.ErrorList),
	newFn func(string, C, provider.Options) (P, error),
	poll time.Duration,
) Type {
	return Type{
		Parse: func(raw json.RawMessage, path *field.Path) (any, field.ErrorList) { return parse(raw, path) },
		New: func(name string, settings any, opts provider.Options) (provider.Provider, error) {
			p, err := newFn(name, settings.(C), opts)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		PollInterval: poll,
		ProviderType: reflect.TypeFor[P](),
	}
}

// Validate reports what is wrong with a descriptor: no type name, no
// Parse or New, no poll interval, no guide, and what is wrong with its
// profile (profile.Validate).
func (d Descriptor) Validate() error {
	var problems []string
	if len(d.TypeNames) == 0 {
		problems = append(problems, "no provider type")
	}
	if d.Type.Parse == nil || d.Type.New == nil {
		problems = append(problems, "no Parse or no New: build Type with TypeOf")
	}
	if d.Type.PollInterval <= 0 {
		problems = append(problems, "no poll interval")
	}
	if d.Guide == "" {
		problems = append(problems, "no guide")
	}
	if err := d.Profile.Validate(); err != nil {
		problems = append(problems, "profile: "+err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("provider type %s: %s", strings.Join(d.TypeNames, "/"), strings.Join(problems, "; "))
	}
	return nil
}
