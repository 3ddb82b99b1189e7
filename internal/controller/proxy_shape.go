package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

// shape is everything in a Proxy that shapes its instance: a change to any
// of it needs a new instance, since no backend can change these in place.
type shape struct {
	Port                int32              `json:"port"`
	Placement           provider.Placement `json:"placement"`
	AllowedSourceRanges []string           `json:"allowedSourceRanges"`
	// CloudInitSHA256 stands for the user-data, so the hash never carries
	// the secret itself and a changed Secret still reshapes the instance.
	CloudInitSHA256 string `json:"cloudInitSHA256"`
	// ClientAuthSHA256 stands for the clientAuth users, like the
	// user-data, when the provider cannot give a running instance new
	// users: a changed Secret replaces the instance (make before break),
	// never a user or a hash in the name. Omitted when empty.
	ClientAuthSHA256 string `json:"clientAuthSHA256,omitempty"`
	// ClientAuth says the Proxy has users that its provider rewrites in
	// place (provider.UsersUpdater): only having them at all shapes the
	// instance (its proxy asks for them), so a rotation keeps it.
	ClientAuth bool `json:"clientAuth,omitempty"`
	// Destinations are rendered into the instance's proxy configuration.
	// Omitted when empty, so a Proxy without rules keeps the name it had
	// before the field existed.
	Destinations []egress.DestinationRule `json:"destinations,omitempty"`
	// Autoheals is status.autoheals: an autoheal asks for a new instance
	// of the same spec, so it needs a new name. Omitted when zero.
	Autoheals int32 `json:"autoheals,omitempty"`
	// EgressAddress is spec.egressAddress: the first instance to have one
	// is made with it, and its reclaim policy is written on the address
	// by the Create that reserves or adopts it. Omitted when absent.
	EgressAddress *egressv1.EgressAddressSpec `json:"egressAddress,omitempty"`
	// AddressPool is the entry's IPAM pool, when it has one: an entry that
	// gains, loses or changes its pool moves its Proxies onto (or off) a
	// pool address. Omitted when none.
	AddressPool string `json:"addressPool,omitempty"`
	// GroupAddress is spec.groupAddress: the group's address and the
	// peers are in the member's keepalived configuration, so a change of
	// them needs a new instance (which the group rolls), except the peers
	// when the provider rewrites them in place
	// (provider.GroupPeersUpdater): then they are left out. Omitted when
	// absent.
	GroupAddress *egressv1.MemberGroupAddress `json:"groupAddress,omitempty"`
}

// inPlace says what the Proxy's provider changes on a running instance,
// so that it stays out of the shape.
type inPlace struct {
	// users: clientAuth's users (provider.UsersUpdater).
	users bool
	// peers: a group member's peers (provider.GroupPeersUpdater).
	peers bool
}

func inPlaceOf(entry *registry.Entry) inPlace {
	return inPlace{users: entry.Users != nil, peers: entry.Peers != nil}
}

// shapeOf computes the shape hash of a Proxy's spec with its resolved
// cloud-init and clientAuth users; in says what the provider changes on
// a running instance. The order of allowedSourceRanges does not matter.
func shapeOf(spec egressv1.ProxySpec, cloudInit, clientAuth provider.Sensitive, in inPlace, autoheals int32, pool string) string {
	ranges := append([]string(nil), spec.AllowedSourceRanges...)
	sort.Strings(ranges)
	sh := shape{
		Port:                spec.Port,
		Placement:           placementOf(spec.Placement),
		AllowedSourceRanges: ranges,
		CloudInitSHA256:     sha256Hex(cloudInit),
		Destinations:        destinationsOf(spec.Destinations),
		Autoheals:           autoheals,
		EgressAddress:       spec.EgressAddress,
		AddressPool:         pool,
		GroupAddress:        spec.GroupAddress,
	}
	if in.peers && sh.GroupAddress != nil {
		sh.GroupAddress = &egressv1.MemberGroupAddress{Address: sh.GroupAddress.Address}
	}
	if in.users {
		sh.ClientAuth = clientAuth.Len() > 0
	} else {
		sh.ClientAuthSHA256 = sha256Hex(clientAuth)
	}
	b, _ := json.Marshal(sh)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sha256Hex stands for a secret in the shape; empty for none.
func sha256Hex(s provider.Sensitive) string {
	if s.Len() == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(s.Reveal()))
	return hex.EncodeToString(sum[:])
}

// destinationsOf is the Proxy's destination rules as providers take them.
func destinationsOf(rules []egressv1.DestinationRule) []egress.DestinationRule {
	if len(rules) == 0 {
		return nil
	}
	out := make([]egress.DestinationRule, len(rules))
	for i, r := range rules {
		out[i] = egress.DestinationRule{Domains: slices.Clone(r.Domains), CIDRs: slices.Clone(r.CIDRs), Ports: slices.Clone(r.Ports)}
	}
	return out
}

func placementOf(p egressv1.Placement) provider.Placement {
	return provider.Placement{Zone: p.Zone, Region: p.Region, MachineType: p.MachineType, Image: p.Image}
}

// createRequest builds the provider request for a Proxy. It is pure: the
// cloud-init and the clientAuth users are resolved by the caller, who also
// says what the provider changes in place (shapeOf).
func createRequest(px *egressv1.Proxy, cloudInit, clientAuth provider.Sensitive, in inPlace, pool string) provider.CreateRequest {
	port := specPort(px.Spec)
	spec := px.Spec
	spec.Port = port
	return provider.CreateRequest{
		Name:                provider.InstanceName(px.Namespace, px.Name, string(px.UID), shapeOf(spec, cloudInit, clientAuth, in, px.Status.Autoheals, pool)),
		Namespace:           px.Namespace,
		ProxyName:           px.Name,
		UID:                 string(px.UID),
		Port:                port,
		AllowedSourceRanges: append([]string(nil), px.Spec.AllowedSourceRanges...),
		Destinations:        destinationsOf(px.Spec.Destinations),
		ClientAuth:          clientAuth,
		CloudInit:           cloudInit,
		Placement:           placementOf(px.Spec.Placement),
		EgressAddress:       egressAddressOf(px, pool != ""),
		Group:               groupOf(px),
	}
}

// groupOf is the ProxyGroup px is a member of: its controller, when that
// is a ProxyGroup and px carries the member labels; nil otherwise.
func groupOf(px *egressv1.Proxy) *provider.GroupRef {
	ref := metav1.GetControllerOf(px)
	if ref == nil || ref.Kind != "ProxyGroup" || ref.APIVersion != egressv1.GroupVersion.String() {
		return nil
	}
	if _, ok := memberIndex(px); !ok || px.Labels[egressv1.LabelGroup] != ref.Name {
		return nil
	}
	return &provider.GroupRef{Namespace: px.Namespace, Name: ref.Name, UID: string(ref.UID)}
}

// egressAddressOf is spec.egressAddress as providers take it: the user's
// address by name, or the one reserved for this Proxy under a name derived
// from it (stable for its life, whatever its shape).
func egressAddressOf(px *egressv1.Proxy, pooled bool) *provider.EgressAddress {
	spec := px.Spec.EgressAddress
	if spec == nil || pooled {
		// An entry with an addressPool keeps the address itself
		// (proxy_pool.go); the provider only configures it.
		return nil
	}
	if spec.Name != "" {
		return &provider.EgressAddress{Name: spec.Name}
	}
	return &provider.EgressAddress{Name: provider.EgressAddressName(px.Namespace, px.Name, string(px.UID)), Reserve: true,
		Retain: spec.ReclaimPolicy == egressv1.ReclaimRetain}
}

const defaultPort = 3128

// specPort is the port a Proxy spec (or a group's template) asks for: the
// CRD defaults it, and this covers objects made before the default existed.
func specPort(spec egressv1.ProxySpec) int32 {
	if spec.Port == 0 {
		return defaultPort
	}
	return spec.Port
}
