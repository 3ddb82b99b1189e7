package health

import (
	"context"
	"fmt"
	"regexp"
	"runtime/debug"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/telemetry"
)

// Reasons the loop itself gives, beside the providers' own.
const (
	// ReasonCheckNotSupported: the provider has no Checker; Healthy is
	// Unknown.
	ReasonCheckNotSupported = "CheckNotSupported"
	// ReasonCheckPanicked: the provider's Check panicked. The panic value is
	// logged, never written: it is not part of CheckResult's no-secrets
	// contract.
	ReasonCheckPanicked = "CheckPanicked"
	// ReasonUnhealthy replaces an unhealthy result's missing or malformed
	// reason, which the API server would refuse.
	ReasonUnhealthy = "Unhealthy"
)

// maxMessage is metav1.Condition's message limit; a longer message would
// make every write of the object fail.
const maxMessage = 32768

// reasonPattern is metav1.Condition's reason rule, checked here so that one
// provider's odd reason cannot make its object unwritable.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// outcome is what one pass learned about one provider.
type outcome struct {
	status  metav1.ConditionStatus
	reason  string
	message string
	target  string
	address string
	details map[string]string
	// keepTarget: the loop made the outcome up (timeout, panic), so the
	// object's target and address still say what is being checked.
	keepTarget bool
	// checked: a Check ran to a verdict, so the gauge has a value.
	checked bool
}

func (o outcome) healthy() bool { return o.status == metav1.ConditionTrue }

func fromResult(r provider.CheckResult) outcome {
	o := outcome{
		status: metav1.ConditionFalse, reason: r.Reason, message: validUTF8(r.Message),
		target: validUTF8(r.Target), address: validUTF8(r.Address), checked: true,
	}
	if len(r.Details) > 0 {
		o.details = make(map[string]string, len(r.Details))
		for k, v := range r.Details {
			o.details[validUTF8(k)] = validUTF8(v)
		}
	}
	if r.Healthy {
		o.status = metav1.ConditionTrue
	}
	if len(o.reason) > 1024 || !reasonPattern.MatchString(o.reason) {
		o.reason = ReasonUnhealthy
		if r.Healthy {
			o.reason = provider.ReasonHealthy
		}
	}
	o.message = truncate(o.message, maxMessage)
	return o
}

func notSupported(e *registry.Entry) outcome {
	return outcome{
		status: metav1.ConditionUnknown, reason: ReasonCheckNotSupported,
		message: fmt.Sprintf("providers of type %s cannot check their backend", e.Type),
	}
}

func timedOut(format string, args ...any) outcome {
	return outcome{status: metav1.ConditionFalse, reason: provider.ReasonTimeout,
		message: fmt.Sprintf(format, args...), keepTarget: true, checked: true}
}

// check runs e's Check under the timeout. A Check that ignores its ctx is
// abandoned at the deadline and reported as Timeout; it keeps its claim on
// e until it returns, so a wedged Check costs one goroutine, not one per
// pass.
func (l *Loop) check(ctx context.Context, e *registry.Entry) outcome {
	if e.Checker == nil {
		return notSupported(e)
	}
	// The pass is the parent of the provider.check span.
	ctx, span := telemetry.StartSpan(ctx, l.TracerProvider, "health.check",
		telemetry.AttrProviderName.String(e.Name), telemetry.AttrProviderType.String(e.Type))
	defer span.End()
	timeout := l.timeout()
	if !l.claim(e) {
		return timedOut("the previous check has not returned yet; it overran its %s timeout", timeout)
	}
	// The deadline is on the wall clock, not l.Clock: it travels with ctx
	// to the backend (gRPC, HTTP), which knows no other clock.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan outcome, 1)
	go func() {
		o := l.run(ctx, e)
		// Released before the outcome is handed over, so the next pass
		// never finds a finished Check still claimed.
		l.release(e)
		done <- o
	}()
	select {
	case o := <-done:
		return o
	case <-ctx.Done():
		// A result that arrived with the deadline is still the truth.
		select {
		case o := <-done:
			return o
		default:
			return timedOut("the check did not return within %s", timeout)
		}
	}
}

// run calls Check, turning a panic into an outcome: a provider's bug must
// not take the operator down.
func (l *Loop) run(ctx context.Context, e *registry.Entry) (o outcome) {
	defer func() {
		if v := recover(); v != nil {
			log.FromContext(ctx).Error(fmt.Errorf("panic: %v", v), "provider check panicked",
				"provider", e.Name, "type", e.Type, "stack", string(debug.Stack()))
			o = outcome{status: metav1.ConditionFalse, reason: ReasonCheckPanicked,
				message: "the check panicked; the operator's log has the details", keepTarget: true, checked: true}
		}
	}()
	return fromResult(e.Checker.Check(ctx))
}

func (l *Loop) claim(e *registry.Entry) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[e] {
		return false
	}
	if l.running == nil {
		l.running = map[*registry.Entry]bool{}
	}
	l.running[e] = true
	return true
}

func (l *Loop) release(e *registry.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, e)
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	n -= len(mark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

// validUTF8 replaces each byte that is not UTF-8 with U+FFFD, as the JSON
// encoding on the way to the API server does; otherwise the object read
// back would differ from the result on every pass and be written each time.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		b = append(b, r) // an invalid byte decodes to RuneError, size 1
		i += size
	}
	return string(b)
}
