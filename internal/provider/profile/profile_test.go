package profile

import (
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// validProfile is a profile with every row filled in.
func validProfile() Profile {
	return Profile{
		Readiness:          Is(ReadinessImmediate),
		ServingSignal:      Is(ServingListener),
		EgressIP:           Is(EgressIPNone),
		CreateReturn:       Is(CreateReturnSubmit),
		DeleteReturn:       Is(DeleteReturnWaits),
		IPSource:           Is(IPSourceDiscovered),
		StaticAddress:      Is(StaticAddressNone),
		GCMark:             Is(GCMarkNativeLabels, GCMarkWrittenMetadata).Note("labels and a description"),
		CreatedAt:          Is(CreatedAtBackendTimestamp),
		ListPartial:        Is(ListPartialFailWhole),
		Quota:              Is(QuotaAbsent),
		NotFound:           Is(NotFoundStatus404),
		PrimaryKey:         Is(PrimaryKeyNameIsKey),
		ProvisioningState:  Is(ProvisioningStateNative),
		AsyncOps:           Is(AsyncOpsNone),
		SecondaryResources: Is(SecondaryResourcesNone),
		Credentials:        Is(CredentialsNone),
		ClientKind:         Is(ClientKindInProcess),
		Timeouts:           Is(TimeoutsCtxOnly),
		Logging:            Is(LoggingTiered),
		ChildSpans:         Is(ChildSpansNone),
		BackendTest:        "itself",
		Placement:          PlacementUse{Zone: "not used", Region: "not used", MachineType: "not used", Image: "not used"},
		CloudInit:          Is(CloudInitIgnored),
		Port:               "the listener's",
		States:             []provider.State{provider.StateRunning, provider.StateStopped},
		Check:              CheckUse{Implemented: true, Probes: "a dial", Reasons: []string{provider.ReasonHealthy, provider.ReasonTimeout}},
		CredentialRotation: "n/a",
		TestedAgainst:      "itself",
	}
}

func TestProfileValidate(t *testing.T) {
	if err := validProfile().Validate(); err != nil {
		t.Fatalf("valid profile: %v", err)
	}
	cases := []struct {
		name   string
		change func(*Profile)
		want   string
	}{
		{"axis without a value", func(p *Profile) { p.Quota = Choice[Quota]{} }, "quota: no value"},
		{"static-address without a value", func(p *Profile) { p.StaticAddress = Choice[StaticAddress]{} }, "static-address: no value"},
		{"static-address outside the vocabulary", func(p *Profile) { p.StaticAddress = Is(StaticAddress("dhcp")) }, `static-address: "dhcp" is not one of pool, none`},
		{"value outside the vocabulary", func(p *Profile) { p.Readiness = Is(Readiness("immediat")) }, `readiness: "immediat" is not one of immediate, provisioning-window`},
		{"value twice", func(p *Profile) { p.GCMark = Is(GCMarkNativeLabels, GCMarkNativeLabels) }, `gc-mark: "native-labels" twice`},
		{"empty prose", func(p *Profile) { p.Port = "" }, "port: no text"},
		{"empty placement field", func(p *Profile) { p.Placement.Image = "" }, "placement.image: no text"},
		{"line break", func(p *Profile) { p.CreateReturn = p.CreateReturn.Note("one\ntwo") }, "create-return: a line break"},
		{"no state", func(p *Profile) { p.States = nil }, "states: none"},
		{"unknown state", func(p *Profile) { p.States = []provider.State{"Booting"} }, `states: "Booting" is not a contract state`},
		{"states out of order", func(p *Profile) { p.States = []provider.State{provider.StateStopped, provider.StateRunning} }, `states: "Running" out of the contract's order`},
		{"reasons without a checker", func(p *Profile) { p.Check.Implemented = false }, "given exactly when a Checker is implemented"},
		{"Healthy not first", func(p *Profile) { p.Check.Reasons = []string{provider.ReasonTimeout, provider.ReasonHealthy} }, "Healthy first"},
		{"no health-check prose", func(p *Profile) { p.Check.Probes = "" }, "health check: no text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := validProfile()
			c.change(&p)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestProfileRowsFollowTheContract pins the page's row order to the
// contract's axes, then the compared rows, and every typed row to its
// vocabulary.
func TestProfileRowsFollowTheContract(t *testing.T) {
	var names []string
	for _, r := range validProfile().Rows() {
		names = append(names, r.Name)
		if _, typed := vocabulary[r.Name]; typed && !r.Axis && r.Name != "cloud-init" {
			t.Errorf("row %s has a vocabulary but is neither an axis nor cloud-init", r.Name)
		}
	}
	want := "readiness serving-signal egress-ip create-return delete-return ip-source static-address gc-mark created-at list-partial quota not-found " +
		"primary-key provisioning-state async-ops secondary-resources credentials client-kind timeouts logging " +
		"child-spans backend-test placement.zone placement.region placement.machineType placement.image " +
		"cloud-init port states health check check reasons credential rotation tested against"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("rows:\n got %s\nwant %s", got, want)
	}
}
