package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// EgressAddress is a Proxy's request for an egress address that outlives
// its instances (spec.egressAddress): the address destinations see stays
// the same through every replacement.
type EgressAddress struct {
	// Name is the address's name on the backend: the user's
	// (spec.egressAddress.name), or EgressAddressName's for an address the
	// provider reserves (Reserve).
	Name string
	// Reserve: the provider reserves Name, marked as the Proxy's, when it
	// does not exist yet, and lists it as a secondary resource of the Proxy
	// (Secondary.Instance empty) unless Retain. false: Name is the user's;
	// it must exist, and the provider never deletes it, changes it or lists
	// it, but for attaching it to the Proxy's instances.
	Reserve bool
	// Retain (reclaimPolicy Retain): an address the provider reserved stays
	// when its Proxy goes. It keeps its marks, so a person can tell whose
	// it was, but ListSecondary leaves it out: nothing collects it. Another
	// Proxy may then name it (Reserve false).
	Retain bool
	// Group, when set, makes the address a ProxyGroup's rather than one
	// Proxy's: the group's controller moves it to the member that holds
	// the group's endpoint, so it goes between the instances of different
	// Proxies. MoveEgressAddress then reserves it itself when Reserve and
	// it does not exist yet, marked with the group's UID (never a
	// member's), and takes it from any instance of this installation that
	// holds it (the group decided the move; no instance of another
	// installation, nor anything else, is ever taken from). Create never
	// sees a group's address: members come up on addresses of their own.
	Group *GroupRef
}

// EgressAddressMover is implemented by providers that keep an egress
// address by moving it between instances (gcp: deleteAccessConfig on the
// old instance, addAccessConfig on the new). A replacement's new instance
// comes up on an address of its own, since the old one still serves with
// the Proxy's; the reconciler calls MoveEgressAddress at the cutover, once
// the new instance serves and before the old one is superseded, and reads
// the new instance again after it (its address may be the moved one).
//
// It is optional and apart from Provider, as UsersUpdater is: a provider
// without it refuses a CreateRequest with an EgressAddress (Permanent,
// naming spec.egressAddress) unless it keeps the address otherwise.
type EgressAddressMover interface {
	// MoveEgressAddress makes instance toID hold addr and fromID (which
	// may be "" or gone) not hold it. It is idempotent: an address already
	// on toID succeeds at the cost of a read. It returns once the backend
	// says toID holds it. NotFound when toID is gone.
	MoveEgressAddress(ctx context.Context, addr EgressAddress, fromID, toID string) error
}

// OpMoveEgressAddress is EgressAddressMover's call, as used in errors and
// log lines.
const OpMoveEgressAddress = "move_egress_address"

// egressAddressPrefix starts the name of every address a provider
// reserves for a Proxy: "proxy-" as instances, then "ip-", so a person
// tells them apart.
const egressAddressPrefix = InstanceNamePrefix + "ip-"

// EgressAddressName derives the name of the address reserved for a Proxy
// (spec.egressAddress without a name): from its namespace, name and UID
// only, never its shape, so that every instance of the Proxy uses the same
// address. It is valid wherever an instance name is (DNS-1035, at most
// MaxInstanceNameLen).
func EgressAddressName(namespace, name, uid string) string {
	sum := sha256.Sum256([]byte(uid + "\x00egress-address"))
	hash := hex.EncodeToString(sum[:])[:nameHashLen]
	room := MaxInstanceNameLen - len(egressAddressPrefix) - 1 - nameHashLen
	body := SanitizeName(namespace) + "-" + SanitizeName(name)
	if len(body) > room {
		body = strings.TrimRight(body[:room], "-")
	}
	return egressAddressPrefix + body + "-" + hash
}
