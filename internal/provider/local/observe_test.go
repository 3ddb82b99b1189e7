package local

import (
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Through the method boundary: one V(1) line per operation outcome, named
// "local" and tagged with the provider, with what local noted (the create's
// outcome); the provider's own detail (addresses, ranges) only at V(2).
func TestLogTiers(t *testing.T) {
	for _, tc := range []struct {
		verbosity  int
		wantDetail bool
	}{{1, false}, {2, true}} {
		ctx, logs := logCtx(tc.verbosity)
		p := newTestProvider(t, testInstallation, 24)
		bp := bounded(p)
		inst, err := bp.Create(ctx, request("logs", "127.0.0.0/8"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = bp.Get(ctx, inst.ID)
		_, _ = bp.ListByTag(ctx)
		_ = bp.Delete(ctx, inst.ID)
		_, _ = bp.Get(ctx, inst.ID) // NotFound
		provider.WithBoundary(testProviderName, Type, p).Checker.Check(ctx)

		for _, msg := range []string{"create done", "get done", "list done", "delete done", "get failed", "check done"} {
			lines := logs.Find(`"msg"="`+msg+`"`, `"provider"="`+testProviderName+`"`, `"level"=1`)
			if len(lines) != 1 || !strings.HasPrefix(lines[0], Type+" ") {
				t.Errorf("V(%d): want one %q line from logger %q, found %q", tc.verbosity, msg, Type, lines)
			}
		}
		if l := logs.Find(`"msg"="create done"`, `"outcome"="created"`, `"ip"="`+inst.IP+`"`); len(l) != 1 {
			t.Errorf("V(%d): the create line lacks its outcome or address: %q", tc.verbosity, logs.Find("create done"))
		}
		if l := logs.Find(`"msg"="get failed"`, `"class"="NotFound"`); len(l) != 1 {
			t.Errorf("V(%d): the failed get does not carry its class: %q", tc.verbosity, logs.Find("get failed"))
		}
		detail := logs.Find(`"msg"="listening"`, `"range"="`+p.cidr.String()+`"`, `"allowedSourceRanges"="127.0.0.0/8"`)
		if got := len(detail) == 1; got != tc.wantDetail {
			t.Errorf("V(%d): listening detail lines %q, want present=%t", tc.verbosity, detail, tc.wantDetail)
		}
	}
	ctx, logs := logCtx(0)
	p := newTestProvider(t, testInstallation, 24)
	mustCreate(t, p, request("quiet"))
	if _, err := bounded(p).Create(ctx, request("quiet")); err != nil || logs.String() != "" {
		t.Errorf("V(0) logged %q", logs)
	}
}

// CloudInit is never read, so it reaches no log line or error, on the
// success path and on refusals.
func TestCloudInitNeverLogged(t *testing.T) {
	const sentinel = "SENTINEL-user-data-5b1e"
	ctx, logs := logCtx(10)
	p := newTestProvider(t, testInstallation, 30)
	var errs []string
	for _, name := range []string{"ci-1", "ci-2", "ci-3", "ci-4"} { // the fourth exhausts the /30
		req := request(name)
		req.CloudInit = provider.Sensitive("#cloud-config\n# " + sentinel)
		if _, err := bounded(p).Create(ctx, req); err != nil {
			errs = append(errs, err.Error())
		}
		req.Port = 0
		if _, err := bounded(p).Create(ctx, req); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) != 5 {
		t.Errorf("want 5 failed Creates (4 bad ports, 1 full range), got %d: %q", len(errs), errs)
	}
	for _, text := range append(errs, logs.String()) {
		if strings.Contains(text, sentinel) {
			t.Errorf("cloud-init leaked: %s", text)
		}
	}
}
