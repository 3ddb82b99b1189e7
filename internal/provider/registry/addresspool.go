package registry

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/ippool"
)

// The pools written in the providers config are served by the operator's
// own allocator (internal/controller, addresspool_controller.go) under this
// group and kind, each named after its entry: an IPAddressClaim's poolRef
// {apiGroup: egress.proxy-operator.dev, kind: AddressPool, name: <entry>}.
// No object of the kind exists; the reference names the entry.
const (
	BuiltinPoolGroup = "egress.proxy-operator.dev"
	BuiltinPoolKind  = "AddressPool"
)

// PoolRef names an IPAM pool as an IPAddressClaim's poolRef does.
type PoolRef struct{ APIGroup, Kind, Name string }

// AddressPool is an entry's addressPool: where its Proxies' addresses come
// from, through Cluster API's IPAM objects.
type AddressPool struct {
	// Ref is the poolRef of the entry's claims.
	Ref PoolRef
	// Pool is the parsed ranges when the built-in allocator serves Ref;
	// nil when another IPAM provider does (ipamPoolRef).
	Pool *ippool.Pool
	// DNS are the resolvers the entry's instances get.
	DNS []netip.Addr
}

// addressPoolOf parses an entry's validated addressPool block; nil for none.
func addressPoolOf(name string, spec *ippool.Spec) (*AddressPool, error) {
	if spec == nil {
		return nil, nil
	}
	p := &AddressPool{DNS: spec.DNS()}
	if r := spec.IPAMPoolRef; r != nil {
		p.Ref = PoolRef{APIGroup: r.APIGroup, Kind: r.Kind, Name: r.Name}
		return p, nil
	}
	pool, err := spec.Pool()
	if err != nil {
		return nil, err
	}
	p.Ref, p.Pool = PoolRef{APIGroup: BuiltinPoolGroup, Kind: BuiltinPoolKind, Name: name}, pool
	return p, nil
}

// checkAddressPool refuses an addressPool on an entry whose type renders no
// static address.
func checkAddressPool(e config.Entry, t Type) *field.Error {
	if e.AddressPool == nil || t.AddressPools {
		return nil
	}
	return field.Forbidden(e.Path.Child("addressPool"),
		fmt.Sprintf("provider type %s gives its instances no static address (docs/providers.md, static-address); an addressPool is for kvm, kvm2 and proxmox entries", e.Type))
}

// SetAddressPool replaces the entry's address pool (Apply does; tests build
// entries by hand).
func (e *Entry) SetAddressPool(p *AddressPool) {
	if e.pool == nil {
		e.pool = &atomic.Pointer[AddressPool]{}
	}
	e.pool.Store(p)
}

// AddressPool is the entry's address pool as last applied; nil for none.
func (e *Entry) AddressPool() *AddressPool {
	if e.pool == nil {
		return nil
	}
	return e.pool.Load()
}
