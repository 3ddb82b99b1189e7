package testenv

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAPIServerRestartKeepsDataAndClients stops kube-apiserver, sees a
// client fail, starts it again and sees the same client read what it wrote
// before: same etcd, same port, same certificates.
func TestAPIServerRestartKeepsDataAndClients(t *testing.T) {
	if os.Getenv(AssetsEnv) == "" {
		t.Skip(errNoAssets)
	}
	dir := t.TempDir()
	e, err := New(WithDataDir(dir), WithLogf(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept"}, Data: map[string]string{"k": "v"}}
	if err := e.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := e.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err == nil {
		t.Fatal("a read succeeded while kube-apiserver was stopped")
	}
	if err := e.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatalf("the client made before the restart: %v", err)
	}
	if got.Data["k"] != "v" {
		t.Errorf("after the restart: %v, want the data written before", got.Data)
	}
}

// TestStopAPIServerNeedsDataDir: without a fixed certificate directory a
// restarted server would present another CA; StopAPIServer refuses.
func TestStopAPIServerNeedsDataDir(t *testing.T) {
	e := Start(t)
	if err := e.StopAPIServer(); err == nil {
		t.Fatal("StopAPIServer without WithDataDir succeeded")
	}
	if err := e.Client.Get(context.Background(), client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
		t.Errorf("the refused stop took the API server away: %v", err)
	}
}
