// Command otelcol is the OpenTelemetry Collector the e2e test (test/e2e)
// sends the operator's traces to: the collector core from the Go module
// proxy with one receiver and one exporter, nothing else, so that what the
// test reads is what a real collector received over OTLP.
//
//   - receiver otlp (OTLP/HTTP; the operator exports http/protobuf by
//     default, internal/telemetry);
//   - exporter file (collector-contrib), writing each export request as one
//     line of OTLP JSON (the protobuf JSON mapping, the same shape a
//     backend's OTLP JSON import takes). Chosen over the core's debug
//     exporter, whose "detailed" output is a text dump meant for eyes and
//     changes between releases: a JSON line per request can be parsed by the
//     test with encoding/json and read by a person with jq, and it keeps
//     every ID (traceId, spanId, parentSpanId) the tree checks need.
//
// The versions are pinned by this tools module's go.mod/go.sum, one
// collector release throughout (core v0.161.0 / v1.67.0 and contrib
// v0.161.0: the newest file exporter served here); build.sh builds it
// once per version into a cache outside the work tree, and
// hack/tools/otelcol/image.sh wraps it in an image with hack/tools/imagebuild.
package main

import (
	"fmt"
	"os"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// version is set by the build (-X main.version=...): the collector release.
var version = "dev"

func components() (otelcol.Factories, error) {
	receivers, err := otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	exporters, err := otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	return otelcol.Factories{
		Receivers: receivers,
		Exporters: exporters,
		Telemetry: otelconftelemetry.NewFactory(),
	}, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol",
			Description: "OpenTelemetry Collector for the egress-proxies-operator e2e test (otlp receiver, file exporter)",
			Version:     version,
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				// --config=PATH (file:PATH) and ${env:VAR} in it (env is the
				// command's default scheme for ${VAR}); no http or yaml
				// providers: the configuration is the file.
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory(), envprovider.NewFactory()},
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "otelcol:", err)
		os.Exit(1)
	}
}
