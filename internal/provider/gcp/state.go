package gcp

import (
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// mapState is the earlier gcp provider's state table with two corrections, both about what
// GCE's statuses mean:
//
//	| status                                     | address | deleting | state        |
//	|--------------------------------------------|---------|----------|--------------|
//	| any                                        | any     | yes      | Terminated   |
//	| PROVISIONING, STAGING, REPAIRING, PENDING  | any     | no       | Provisioning |
//	| RUNNING                                    | none    | no       | Provisioning |
//	| RUNNING                                    | set     | no       | Running      |
//	| STOPPING, SUSPENDING, DEPROVISIONING       | any     | no       | Stopped      |
//	| STOPPED, SUSPENDED, TERMINATED             | any     | no       | Stopped      |
//	| anything else                              | any     | no       | Stopped      |
//
// "deleting" is a delete operation of ours in flight on the instance: it
// never reads Running, whatever the status still says (a GET right after
// the delete may say RUNNING), and Terminated is what it is (ended for
// good). TERMINATED is GCE's stopped state, which instances.start leaves
// ("the instance has stopped, by explicit action or underlying failure"):
// the earlier providers reported it as Terminated, so the reconciler deleted and
// re-created a VM it could start; here it is Stopped, and Create starts
// it. The address is the one of the entry's address mode (address).
func mapState(status, ip string, deleting bool) provider.State {
	if deleting {
		return provider.StateTerminated
	}
	switch status {
	case "PROVISIONING", "STAGING", "REPAIRING", "PENDING":
		return provider.StateProvisioning
	case "RUNNING":
		if ip == "" {
			return provider.StateProvisioning
		}
		return provider.StateRunning
	}
	return provider.StateStopped
}

// address is the instance's address in the entry's mode: the external NAT
// IP of its first NIC's first access config, or the NIC's internal IP. The
// earlier providers read the external one only, so a VM without one stayed
// Provisioning for ever.
func address(in *computepb.Instance, mode string) string {
	nics := in.GetNetworkInterfaces()
	if len(nics) == 0 {
		return ""
	}
	if mode == AddressInternal {
		return nics[0].GetNetworkIP()
	}
	for _, ac := range nics[0].GetAccessConfigs() {
		if ip := ac.GetNatIP(); ip != "" {
			return ip
		}
	}
	return ""
}

// createdAt parses GCE's creationTimestamp (RFC 3339); ok is false when it
// does not parse, and the zero time means "age unknown".
func createdAt(ts string) (time.Time, bool) {
	if ts == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}
