package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	reloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "egress_proxy_config_last_reload_successful",
		Help: "1 when the last change of the providers config was applied, 0 when it was refused and the previous config still runs.",
	})
	reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "egress_proxy_config_last_reload_success_timestamp_seconds",
		Help: "When the providers config was last applied.",
	})
)

func init() {
	metrics.Registry.MustRegister(reloadSuccess, reloadTime)
}

// Watcher reloads the providers config file when it changes. It watches the
// file's directory, not the file: a mounted ConfigMap changes by swapping a
// symlink (..data), which raises no event on the file itself. A periodic
// re-read catches events that were missed; unchanged content is never
// re-applied.
type Watcher struct {
	Registry *Registry
	Path     string
	// Resync is how often the file is re-read without an event.
	Resync time.Duration
	// Debounce lets a burst of events (the kubelet's swap is several) end
	// before the file is read.
	Debounce time.Duration
	// OnResult is told every attempt's outcome: nil when a change was
	// applied, the path-qualified error when it was refused.
	OnResult func(err error)

	applied [sha256.Size]byte
}

// Load reads the file and applies it: the first load, at start, where an
// error stops the operator. It records what was applied, so that Start
// applies only later changes, and never misses one made in between.
func (w *Watcher) Load() error {
	data, err := os.ReadFile(w.Path)
	if err != nil {
		return fmt.Errorf("providers config: %w", err)
	}
	if err := w.apply(data); err != nil {
		return err
	}
	w.applied = sha256.Sum256(data)
	return nil
}

// Start runs until ctx ends; it implements manager.Runnable. Load must
// have succeeded first.
func (w *Watcher) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("providers-config").WithValues("path", w.Path)
	if w.Resync == 0 {
		w.Resync = time.Minute
	}
	if w.Debounce == 0 {
		w.Debounce = 250 * time.Millisecond
	}
	reloadSuccess.Set(1)
	reloadTime.SetToCurrentTime()

	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching the providers config: %w", err)
	}
	defer fw.Close()
	if err := fw.Add(filepath.Dir(w.Path)); err != nil {
		return fmt.Errorf("watching the providers config: %w", err)
	}

	resync := time.NewTicker(w.Resync)
	defer resync.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			log.V(2).Info("config directory changed", "event", ev.String())
			debounce = time.After(w.Debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			log.Error(err, "watching the providers config; changes are still picked up by the periodic re-read")
		case <-debounce:
			debounce = nil
			w.reload(log)
		case <-resync.C:
			w.reload(log)
		}
	}
}

// reload applies the file if its content changed since the last attempt.
// A refused file is not retried until it changes again.
func (w *Watcher) reload(log logr.Logger) {
	data, err := os.ReadFile(w.Path)
	if err != nil {
		// Mid-swap the file can be briefly absent; the next event or
		// resync reads it again.
		log.V(1).Info("providers config unreadable for now", "error", err.Error())
		return
	}
	sum := sha256.Sum256(data)
	if bytes.Equal(sum[:], w.applied[:]) {
		return
	}
	w.applied = sum
	err = w.apply(data)
	if err != nil {
		reloadSuccess.Set(0)
		log.Error(err, "providers config change refused; the previous config keeps running")
	} else {
		reloadSuccess.Set(1)
		reloadTime.SetToCurrentTime()
		names := []string{}
		for _, e := range w.Registry.Entries() {
			names = append(names, e.Name)
		}
		log.Info("providers config reloaded", "providers", names)
	}
	if w.OnResult != nil {
		w.OnResult(err)
	}
}

func (w *Watcher) apply(data []byte) error {
	entries, err := parseAndValidate(w.Registry, data)
	if err != nil {
		return fmt.Errorf("providers config %s: %w", w.Path, err)
	}
	if err := w.Registry.Apply(entries); err != nil {
		return fmt.Errorf("providers config %s: %w", w.Path, err)
	}
	return nil
}

// NeedLeaderElection is false: every replica keeps its providers current,
// so a standby that becomes leader runs the config of the moment.
func (w *Watcher) NeedLeaderElection() bool { return false }
