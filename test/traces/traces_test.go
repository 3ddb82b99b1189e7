package traces

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/operator"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/gcp/gcptest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv/otelcol"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// backend is one provider's faithful fake, as the operator's providers
// config names it.
type backend struct {
	name      string   // the entry's name
	entry     string   // the providers config's entry (YAML, one list item)
	sentinels []string // its credentials: never in a span
	// report publishes, as the guest's reporter does, that the Proxy's
	// instance serves; an error while the instance is not there yet.
	report func(px *egressv1.Proxy) error
	// isBackend picks the spans of the backend's requests.
	isBackend func(otelcol.Span) bool
}

// httpSpan picks the provider HTTP clients' spans (httpobserve).
func httpSpan(s otelcol.Span) bool { return strings.HasPrefix(s.Name, "HTTP ") }

func gcpBackend(t *testing.T) backend {
	gce := gcptest.New(t)
	key, err := os.ReadFile(gce.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return backend{name: "gce",
		entry: fmt.Sprintf("{name: gce, type: gcp, gcp: {project: %s, endpoint: %q, credentialsFile: %q, defaultZone: us-central1-a}}",
			gce.Project, gce.Endpoint(), gce.KeyFile),
		sentinels: []string{gce.Tokens.Token(gce.Email), privateKeyBody(string(key))},
		report: func(px *egressv1.Proxy) error {
			zone, name, ok := strings.Cut(strings.TrimPrefix(px.Status.ProviderID, "zones/"), "/instances/")
			if !ok {
				return fmt.Errorf("no instance yet (%q)", px.Status.ProviderID)
			}
			now := time.Now()
			return gce.Fake.SetGuestAttribute(gce.Project, zone, name, servingreport.GuestAttributeNamespace, servingreport.GuestAttributeKey,
				servingreport.Format(servingreport.Report{Serving: true, Checked: now, Answered: now, CloudInit: servingreport.CloudInitDone}))
		},
		isBackend: httpSpan,
	}
}

func proxmoxBackend(t *testing.T) backend {
	fake := fakepve.New().Start()
	t.Cleanup(fake.Close)
	tokenFile, caFile, err := fake.WriteCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	token := fake.Token() // PVEAPIToken=user@realm!id=secret
	secret := token[strings.LastIndex(token, "=")+1:]
	return backend{name: "pve",
		entry: fmt.Sprintf("{name: pve, type: proxmox, proxmox: {url: %q, tokenFile: %q, caFile: %q, nodes: [pve1], templates: {debian-12: 9000}, isoStorage: local}}",
			fake.URL(), tokenFile, caFile),
		sentinels: []string{secret},
		report: func(px *egressv1.Proxy) error {
			parts := strings.Split(px.Status.ProviderID, "/") // vms/<vmid>/<name>
			if len(parts) != 3 {
				return fmt.Errorf("no VM yet (%q)", px.Status.ProviderID)
			}
			vmid, err := strconv.Atoi(parts[1])
			if err != nil {
				return err
			}
			now := time.Now()
			fake.SetGuestReport(vmid, servingreport.Report{Serving: true, Checked: now, Answered: now, Version: "5.7",
				CloudInit: servingreport.CloudInitDone})
			return nil
		},
		isBackend: httpSpan,
	}
}

// privateKeyBody is a line from the middle of the key file's PEM key: the
// secret part, which no span may hold even in part.
func privateKeyBody(keyJSON string) string {
	lines := strings.Split(strings.ReplaceAll(keyJSON, `\n`, "\n"), "\n")
	return lines[len(lines)/2]
}

// TestProviderTracesInTheCollector runs one Proxy's whole lifecycle on the
// gcp provider over its fake Compute API and on the proxmox provider over
// its fake PVE API, with the operator exporting OTLP to a real
// OpenTelemetry Collector on loopback, and reads back what the collector
// wrote: each reconcile one trace with one root carrying the Proxy's UID,
// every backend request (the background create and delete steps' too)
// under a provider span, and no credential or cloud-init secret anywhere.
func TestProviderTracesInTheCollector(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(*testing.T) backend
	}{{"gcp", gcpBackend}, {"proxmox", proxmoxBackend}} {
		t.Run(tc.name, func(t *testing.T) {
			collector := otelcol.Start(t)
			b := tc.backend(t)
			cloudInitSentinel := "SENTINEL-cloudinit-" + tc.name
			uid := lifecycle(t, b, collector.Endpoint(), cloudInitSentinel)
			Verify(t, collector, uid, b.isBackend, append(b.sentinels, cloudInitSentinel),
				"proxy.uid", "provider.name", "error.class", "url.full", "http.response.status_code")
		})
	}
}

// lifecycle runs the operator exporting to the collector at endpoint,
// creates a Proxy on b, waits for it Ready, deletes it, waits for it gone,
// stops the operator (which flushes its spans) and returns the Proxy's UID.
func lifecycle(t *testing.T, b backend, endpoint, cloudInitSentinel string) string {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: batches leave soon after the spans end
	ctx := context.Background()
	ns := env.Namespace(t, "traces")
	cfg := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(cfg, []byte("providers:\n- "+b.entry+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	op, err := operator.New(ctx, env.Config, operator.Options{ProvidersConfig: cfg, MetricsAddr: "0", ProbeAddr: "0",
		InstallationID: "traces", Namespaces: []string{ns}, SkipControllerNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	stopped := false
	stopOperator := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("operator: %v", err)
			}
		}
	}
	t.Cleanup(stopOperator)

	// The guest's cloud-init, with a secret of the user's.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cloud-init"},
		StringData: map[string]string{"user-data": "#cloud-config\nwrite_files:\n- path: /etc/partner-token\n  content: " + cloudInitSentinel + "\n"}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	px := &egressv1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "traced"},
		Spec: egressv1.ProxySpec{Provider: b.name,
			AllowedSourceRanges: []string{"192.0.2.0/24"},
			CloudInitSecretRef:  &egressv1.SecretKeySelector{Name: "cloud-init", Key: "user-data"}}}
	if err := env.Client.Create(ctx, px); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(px)
	testenv.EventuallyNil(t, "Proxy "+px.Name+" Ready", func() error {
		if err := env.Client.Get(ctx, key, px); err != nil {
			return err
		}
		if meta.IsStatusConditionTrue(px.Status.Conditions, egressv1.ConditionReady) {
			return nil
		}
		if err := b.report(px); err != nil {
			return err
		}
		return fmt.Errorf("not Ready: %v", px.Status.Conditions)
	})
	if err := env.Client.Delete(ctx, px); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyNil(t, "Proxy "+px.Name+" gone", func() error {
		err := env.Client.Get(ctx, key, &egressv1.Proxy{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	stopOperator() // flushes the exporter
	return string(px.UID)
}
