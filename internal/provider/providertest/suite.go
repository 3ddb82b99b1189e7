package providertest

import (
	"testing"
)

// testCase is one contract rule, run on a fresh provider.
type testCase struct {
	name string
	run  func(t *testing.T, h Harness)
}

// cases are the contract rules in the order a reader meets them in the
// contract: lifecycle, adoption and marks, IDs, errors, ctx, secrets.
var cases = []testCase{
	{"CreateIsIdempotentByName", testCreateIsIdempotentByName},
	{"AdoptsOwnInstance", testAdoptsOwnInstance},
	{"AdoptionFillsEmptyUIDMark", testAdoptionFillsEmptyUIDMark},
	{"AdoptingStoppedStartsIt", testAdoptingStoppedStartsIt},
	{"RefusesOtherUID", testRefusesOtherUID},
	{"RefusesUnmarked", testRefusesUnmarked},
	{"IgnoresOtherInstallation", testIgnoresOtherInstallation},
	{"LostMarkIsNotOurs", testLostMarkIsNotOurs},
	{"GetMissingIsNotFound", testGetMissingIsNotFound},
	{"DeleteMissingSucceeds", testDeleteMissingSucceeds},
	{"DeleteLeavesNothing", testDeleteLeavesNothing},
	{"ListByTagReturnsMarkedOnly", testListByTagReturnsMarkedOnly},
	{"IDsRoundTrip", testIDsRoundTrip},
	{"GetReachesRunning", testGetReachesRunning},
	{"ErrorsCarryConfiguredName", testErrorsCarryConfiguredName},
	{"CancelledContextEndsEveryCall", testCancelledContextEndsEveryCall},
	{"CloudInitNeverLeaks", testCloudInitNeverLeaks},
	{"ClientAuthNeverLeaks", testClientAuthNeverLeaks},
	{"SecondaryWithoutInstanceIsCollectable", testSecondaryWithoutInstanceIsCollectable},
	{"SlowCreateReturnsWithinBound", testSlowCreateReturnsWithinBound},
	{"BackgroundResultReachesNextCall", testBackgroundResultReachesNextCall},
	{"ResumesAfterRestart", testResumesAfterRestart},
	{"DeleteCancelsInFlightCreate", testDeleteCancelsInFlightCreate},
	{"EgressAddressKeptAcrossInstances", testEgressAddressKeptAcrossInstances},
	{"StaticAddressIsTheInstanceAddress", testStaticAddressIsTheInstanceAddress},
}

// CaseNames lists the suite's subtests, for a provider's test that wants
// to run or skip some by name.
func CaseNames() []string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	return names
}

// Run runs the conformance suite against the provider h builds: one named
// subtest per contract rule, each on a fresh provider and backend from
// h.New, every call carrying a ctx with a capturing logger. The subtests
// run one after another, because a harness over a real backend may not
// take concurrent cases.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Name == "" || h.New == nil || h.Request == nil {
		t.Fatal("providertest: Harness needs Name, New and Request")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}
