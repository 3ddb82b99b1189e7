package telemetry

import (
	"context"
	"strings"
	"testing"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

func TestExportFromEnv(t *testing.T) {
	const ep = "http://collector:4318"
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		proto   string
		wantErr string
	}{
		{name: "nothing set", env: nil, on: false},
		{name: "empty endpoint is unset", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, on: false},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep}, on: true, proto: ProtocolHTTP},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ep + "/v1/traces"}, on: true, proto: ProtocolHTTP},
		{name: "exporter otlp without endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, proto: ProtocolHTTP},
		{name: "exporter otlp, case and spaces", env: map[string]string{"OTEL_TRACES_EXPORTER": " OTLP "}, on: true, proto: ProtocolHTTP},
		{name: "exporter none beats endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ep}, on: false},
		{name: "none beats otlp in a list", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,none"}, on: false},
		{name: "sdk disabled beats everything", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": ep}, on: false},
		{name: "sdk disabled false", env: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": ep}, on: true, proto: ProtocolHTTP},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, proto: ProtocolGRPC},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, proto: ProtocolHTTP},
		{name: "traces protocol grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, on: true, proto: ProtocolGRPC},
		{name: "protocol ignored when off", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, on: false},
		{name: "http/json unsupported", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json" is not supported`},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `"zipkin" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := exportFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Enabled != tc.on || cfg.Protocol != tc.proto {
				t.Errorf("got enabled=%v protocol=%q, want %v %q", cfg.Enabled, cfg.Protocol, tc.on, tc.proto)
			}
			if cfg.Reason == "" {
				t.Error("no reason for the start-up log line")
			}
		})
	}
}

func TestResourceServiceName(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	Version = "v9.9.9"
	t.Cleanup(func() { Version = "" })

	res, err := newResource(context.Background(), "egress-proxies-operator")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Set().Value(semconv.ServiceNameKey); v.AsString() != "egress-proxies-operator" {
		t.Errorf("service.name = %q", v.AsString())
	}
	if v, _ := res.Set().Value(semconv.ServiceVersionKey); v.AsString() != "v9.9.9" {
		t.Errorf("service.version = %q", v.AsString())
	}

	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	res, err = newResource(context.Background(), "egress-proxies-operator")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Set().Value(semconv.ServiceNameKey); v.AsString() != "from-env" {
		t.Errorf("OTEL_SERVICE_NAME should win: service.name = %q", v.AsString())
	}
}
