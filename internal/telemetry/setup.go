// Package telemetry gives the operator its traces and provider metrics:
// Setup configures OTLP trace export from the standard OTEL_* variables,
// Decorate is the registry decorator that spans and counts every provider
// call, Reconciler and StartSpan open the parent spans, and every span's
// IDs reach the log lines written under it. Provider code repeats none of
// this.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Version is the operator's version as the resource's service.version; the
// build sets it with -ldflags "-X <this package>.Version=v1.2.3". Empty, the
// module version from the build info is used.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

// OTLP protocols, as OTEL_EXPORTER_OTLP_PROTOCOL spells them.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// exportConfig is what the environment asks of trace export.
type exportConfig struct {
	Enabled  bool
	Protocol string // set when Enabled
	// Reason says why, for the start-up log line.
	Reason string
}

// exportFromEnv decides from the OTEL_* variables whether and how traces
// are exported. It reads nothing else: the exporters themselves read the
// endpoint, headers, TLS, timeout and compression variables. An empty
// variable counts as unset, as in the exporters.
func exportFromEnv(getenv func(string) string) (exportConfig, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return exportConfig{Reason: "OTEL_SDK_DISABLED=true"}, nil
	}
	on := false
	reason := ""
	if v := get("OTEL_TRACES_EXPORTER"); v != "" {
		for _, e := range strings.Split(v, ",") {
			switch e = strings.ToLower(strings.TrimSpace(e)); e {
			case "none":
				// The spec: "none" wins over anything listed with it.
				return exportConfig{Reason: "OTEL_TRACES_EXPORTER=" + v}, nil
			case "otlp":
				on, reason = true, "OTEL_TRACES_EXPORTER="+v
			default:
				return exportConfig{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: %q is not supported (otlp or none)", v, e)
			}
		}
	} else {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if get(k) != "" {
				on, reason = true, k+" is set"
				break
			}
		}
	}
	if !on {
		return exportConfig{Reason: "no OTLP endpoint configured"}, nil
	}
	proto, from := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if proto == "" {
		proto, from = get("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch proto {
	case "", ProtocolHTTP:
		proto = ProtocolHTTP
	case ProtocolGRPC:
	default:
		return exportConfig{}, fmt.Errorf("%s=%q is not supported (%s or %s)", from, proto, ProtocolHTTP, ProtocolGRPC)
	}
	return exportConfig{Enabled: true, Protocol: proto, Reason: reason}, nil
}

// Setup configures trace export from the standard OTEL_* variables and
// installs the result as the global tracer provider, with the W3C trace
// context and baggage propagators. Export is on when an OTLP endpoint is
// set (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// or OTEL_TRACES_EXPORTER=otlp, over http/protobuf unless
// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says grpc; it is off with
// OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED=true or nothing set, and
// then the provider is a no-op that Decorate, Reconciler and StartSpan skip
// entirely.
//
// shutdown flushes the spans still queued and stops the exporter; call it
// once, after the manager stopped, with a deadline. On error (an unsupported
// value in the variables) a no-op provider and shutdown are returned too, so
// a caller may log the error and run without traces. ctx's logger, if any,
// gets one line saying what was decided and the SDK's export errors.
func Setup(ctx context.Context, serviceName string) (trace.TracerProvider, func(context.Context) error, error) {
	log := logr.FromContextOrDiscard(ctx).WithName("telemetry")
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	off := func(err error) (trace.TracerProvider, func(context.Context) error, error) {
		tp := noop.NewTracerProvider()
		otel.SetTracerProvider(tp)
		return tp, func(context.Context) error { return nil }, err
	}

	cfg, err := exportFromEnv(os.Getenv)
	if err != nil {
		return off(fmt.Errorf("trace export: %w", err))
	}
	if !cfg.Enabled {
		log.Info("trace export off", "reason", cfg.Reason)
		return off(nil)
	}

	var exp sdktrace.SpanExporter
	if cfg.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return off(fmt.Errorf("trace export: OTLP %s exporter: %w", cfg.Protocol, err))
	}
	res, err := newResource(ctx, serviceName)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return off(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	if log.GetSink() != nil {
		// Export failures would otherwise go to stderr unstructured.
		otel.SetLogger(log)
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Error(err, "OpenTelemetry") }))
	}
	log.Info("trace export on", "protocol", cfg.Protocol, "reason", cfg.Reason)
	return tp, tp.Shutdown, nil
}

// newResource names the service: serviceName and the version, overridden
// by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (later detectors win).
func newResource(ctx context.Context, serviceName string) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(version())),
		resource.WithFromEnv(),
	)
	// A detector that found only part of what it looks for is not a reason
	// to run without traces.
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace export: resource: %w", err)
	}
	return res, nil
}
