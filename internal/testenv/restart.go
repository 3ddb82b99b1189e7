package testenv

import (
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/client-go/discovery"
)

// StopAPIServer stops kube-apiserver and leaves etcd running, for a drill
// that takes the API server away under load; StartAPIServer brings it back
// on the same port, with the same certificates and the same etcd, so every
// client made from Config (and every kubeconfig written) works again. It
// needs an Env made WithDataDir: envtest removes a certificate directory of
// its own making when the server stops, and a new one would be signed by
// another CA.
func (e *Env) StopAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("testenv: the control plane is stopped")
	}
	s := e.Environment.ControlPlane.APIServer
	if !fixedDataDir(e) {
		return errors.New("testenv: StopAPIServer needs an Env made WithDataDir (a fixed certificate directory)")
	}
	return s.Stop()
}

// StartAPIServer starts the kube-apiserver StopAPIServer stopped and waits
// until it answers.
func (e *Env) StartAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("testenv: the control plane is stopped")
	}
	if err := e.Environment.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	// Start returns once /healthz answers.
	dc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		return err
	}
	if _, err := dc.ServerVersion(); err != nil {
		return fmt.Errorf("kube-apiserver restarted but does not answer: %w", err)
	}
	return nil
}

// fixedDataDir says whether the Env was made WithDataDir: its certificate
// and etcd directories are the two siblings WithDataDir makes (envtest's
// own are temporary directories of random names).
func fixedDataDir(e *Env) bool {
	cp := e.Environment.ControlPlane
	cert, data := cp.APIServer.CertDir, cp.Etcd.DataDir
	return cert != "" && data != "" && filepath.Base(cert) == "kube-apiserver" &&
		filepath.Base(data) == "etcd" && filepath.Dir(cert) == filepath.Dir(data)
}
