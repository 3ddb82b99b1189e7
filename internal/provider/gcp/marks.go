package gcp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The marks, in GCE's forms. Instances carry them as labels
// (provider.Marks.Labels: the keys are valid GCE label keys, and the
// values are checked against GCE's label rules before any call). Firewall
// rules have no labels in the Compute API, so a rule carries them in its
// description, one "key=value" line each, beside the zone of its instance;
// the rule's name is its instance's name.

// instanceLabels are the labels of a new instance: the entry's own, then
// the marks (Validate keeps the entry's keys away from the marks').
func instanceLabels(extra map[string]string, marks provider.Marks) map[string]string {
	out := make(map[string]string, len(extra)+3)
	for k, v := range extra {
		out[k] = v
	}
	for k, v := range marks.Labels() {
		out[k] = v
	}
	return out
}

// checkLabelValue refuses a mark value GCE would refuse, naming what it is.
func checkLabelValue(what, v string) error {
	if !labelValue.MatchString(v) {
		return provider.Errorf(provider.ErrPermanent,
			"%s %q cannot be a GCE label value (at most 63 lower-case letters, digits, '_' or '-')", what, v)
	}
	return nil
}

// instanceTag is the network tag unique to the instance named name, which
// its managed firewall rule targets: the prefix and 10 hex digits of the
// name's SHA-256 (the name itself may not fit beside the prefix).
func instanceTag(prefix, name string) string {
	sum := sha256.Sum256([]byte(name))
	return prefix + "-" + hex.EncodeToString(sum[:])[:10]
}

// Lines of a managed rule's description.
const (
	descriptionHead = "Managed by egress-proxies-operator: admits the Proxy's allowedSourceRanges to its port. Do not edit; the operator reverts changes."
	markZone        = "proxy-operator-zone"
)

// ruleMarks are the marks a rule's description carries.
type ruleMarks struct {
	provider.Marks
	// Zone is where the rule's instance is (or was to be) made.
	Zone string
}

func (m ruleMarks) description(namespace, proxy string, port int32) string {
	var b strings.Builder
	b.WriteString(descriptionHead)
	fmt.Fprintf(&b, "\nProxy %s/%s, port %d.", namespace, proxy, port)
	managed := "false"
	if m.Managed {
		managed = provider.MarkManagedValue
	}
	fmt.Fprintf(&b, "\n%s=%s\n%s=%s\n%s=%s\n%s=%s", provider.MarkManaged, managed, provider.MarkUID, m.UID,
		provider.MarkInstallation, m.Installation, markZone, m.Zone)
	return b.String()
}

// parseRuleMarks reads the marks from a rule's description; a rule without
// them has zero marks (not ours).
func parseRuleMarks(fw *computepb.Firewall) ruleMarks {
	var m ruleMarks
	for _, line := range strings.Split(fw.GetDescription(), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case provider.MarkManaged:
			m.Managed = v == provider.MarkManagedValue
		case provider.MarkUID:
			m.UID = v
		case provider.MarkInstallation:
			m.Installation = v
		case markZone:
			m.Zone = v
		}
	}
	return m
}
