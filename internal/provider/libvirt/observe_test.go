package libvirt

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// lineLog collects a funcr logger's lines.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) logger(v int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: v})
}

func (l *lineLog) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// seamRPCs are the seam's RPC methods: every method but the connection's
// own (Disconnected, Close).
func seamRPCs() []reflect.Method {
	var ms []reflect.Method
	bt := reflect.TypeOf((*backend)(nil)).Elem()
	for i := 0; i < bt.NumMethod(); i++ {
		if m := bt.Method(i); m.Name != "Disconnected" && m.Name != "Close" {
			ms = append(ms, m)
		}
	}
	return ms
}

// callRPC calls method m of b with ctx and zero arguments (an empty
// reader for an upload).
func callRPC(ctx context.Context, b backend, m reflect.Method) {
	fn := reflect.ValueOf(b).MethodByName(m.Name)
	args := []reflect.Value{reflect.ValueOf(ctx)}
	for i := 1; i < fn.Type().NumIn(); i++ {
		in := fn.Type().In(i)
		if in == reflect.TypeOf((*io.Reader)(nil)).Elem() {
			args = append(args, reflect.ValueOf(io.Reader(strings.NewReader(""))))
			continue
		}
		args = append(args, reflect.Zero(in))
	}
	fn.Call(args)
}

// Every seam RPC is spanned and logged exactly once by the decorator, as a
// child of the operation span; without a parent no span is started.
func TestObserveSpansAndLogsEveryRPCOnce(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	h := newFakeHost("h1")
	p := newFakeProvider(t, h)
	p.tracerProvider = tp
	raw, err := h.connect(context.Background(), p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	b := p.observe("h1", raw)

	var logs lineLog
	ctx := logr.NewContext(context.Background(), logs.logger(1))
	for _, m := range seamRPCs() {
		callRPC(ctx, b, m) // no parent span
	}
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans without a parent", n)
	}

	ctx, op := tp.Tracer("test").Start(ctx, "provider.create")
	for _, m := range seamRPCs() {
		callRPC(ctx, b, m)
	}
	op.End()
	count := map[string]int{}
	for _, s := range sr.Ended() {
		if s.Name() == "provider.create" {
			continue
		}
		count[s.Name()]++
		if s.Parent().SpanID() != op.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the operation span", s.Name())
		}
	}
	for _, m := range seamRPCs() {
		if n := count["libvirt."+m.Name]; n != 1 {
			t.Errorf("span libvirt.%s: %d, want 1", m.Name, n)
		}
		// Two rounds: without and with a parent span.
		if n := len(logs.matching(fmt.Sprintf(`"msg"="libvirt call" "rpc"="%s" "host"="h1"`, m.Name))); n != 2 {
			t.Errorf("log lines for %s: %d, want 2", m.Name, n)
		}
	}
	if len(count) != len(seamRPCs()) {
		t.Errorf("spans %v: %d kinds for %d RPCs", count, len(count), len(seamRPCs()))
	}
}

// A failed RPC's span and line carry the class and libvirt's code.
func TestObserveRecordsTheFailure(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	h := newFakeHost("h1")
	p := newFakeProvider(t, h)
	p.tracerProvider = tp
	raw, err := h.connect(context.Background(), p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	var logs lineLog
	ctx, op := tp.Tracer("test").Start(logr.NewContext(context.Background(), logs.logger(1)), "provider.get")
	_, _ = p.observe("h1", raw).DomainLookupByName(ctx, "proxy-missing")
	op.End()
	lines := logs.matching(`"rpc"="DomainLookupByName"`)
	if len(lines) != 1 || !strings.Contains(lines[0], `"domain"="proxy-missing"`) || !strings.Contains(lines[0], `"class"="NotFound"`) ||
		!strings.Contains(lines[0], `"libvirtCode"="ErrNoDomain"`) {
		t.Fatalf("log lines %q", lines)
	}
	for _, s := range sr.Ended() {
		if s.Name() != "libvirt.DomainLookupByName" {
			continue
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if attrs["libvirt.domain"] != "proxy-missing" || attrs["libvirt.host"] != "h1" ||
			attrs["libvirt.libvirt_code"] != "ErrNoDomain" || attrs["libvirt.error_class"] != "NotFound" {
			t.Fatalf("span attributes %v", attrs)
		}
		return
	}
	t.Fatal("no libvirt.DomainLookupByName span")
}

// The production connector spans each dial and logs its outcome with the
// stage of a failure.
func TestObserveDial(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	f := newSSHFixture(t, nil)
	f.p.tracerProvider = tp
	var logs lineLog
	ctx, op := tp.Tracer("test").Start(logr.NewContext(context.Background(), logs.logger(1)), "provider.check")
	f.mustDial(ctx)
	f.sshd.authorize(newClientKey(t).signer.PublicKey())
	if _, err := f.dial(ctx); err == nil {
		t.Fatal("a refused dial succeeded")
	}
	op.End()
	var dials []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "libvirt.dial" {
			dials = append(dials, s)
		}
	}
	if len(dials) != 2 || dials[0].Parent().SpanID() != op.SpanContext().SpanID() {
		t.Fatalf("%d libvirt.dial spans", len(dials))
	}
	if len(logs.matching(`"msg"="libvirt host connected" "host"="h1"`)) != 1 ||
		len(logs.matching(`"msg"="libvirt host connect failed" "host"="h1"`)) != 1 ||
		len(logs.matching(`"stage"="ssh"`)) != 1 {
		t.Fatalf("dial lines %q", logs.matching("libvirt host"))
	}
}
