package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An installation is one operator deployment: the Proxies it serves (its
// scope: --proxy-class and --watch-namespaces) and the identity it marks
// its instances with (--installation-id). docs/operations.md explains both.

// installationIDPattern is what every backend's marks accept: a Kubernetes
// label value (alphanumeric at both ends, no dots here) and a GCE label
// value (lowercase letters, digits, '-' and '_'), both at most 63 chars.
var installationIDPattern = regexp.MustCompile(`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)

const maxInstallationIDLen = 63

// installationSuffixLen is how many hex digits of the namespace-and-class
// hash follow the kube-system UID: 48 bits tell apart the few installations
// one cluster holds, and 36 + 1 + 12 = 49 chars stay under 63.
const installationSuffixLen = 12

// serviceAccountNamespaceFile is where a Pod finds its namespace when the
// downward API does not pass POD_NAMESPACE.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// checkInstallationID refuses an identity some backend's marks cannot hold.
func checkInstallationID(id string) error {
	if len(id) > maxInstallationIDLen || !installationIDPattern.MatchString(id) {
		return fmt.Errorf("installation ID %q: must be 1 to %d lowercase letters, digits, '-' or '_', starting and ending with a letter or digit (it is a label value on every backend)", id, maxInstallationIDLen)
	}
	return nil
}

// deriveInstallationID is the default installation ID: the kube-system
// namespace's UID (different in every cluster, so clusters sharing a
// backend differ with no configuration), then a hash of the operator's
// namespace and class (different for every installation in one cluster).
// It is a stored format: instances carry it, and a change would make every
// existing instance another installation's. installation_test.go pins it.
func deriveInstallationID(clusterUID, namespace, class string) (string, error) {
	// '/' is in neither a namespace nor a class name: no two pairs hash
	// the same input.
	sum := sha256.Sum256([]byte(namespace + "/" + class))
	id := strings.ToLower(clusterUID) + "-" + hex.EncodeToString(sum[:])[:installationSuffixLen]
	if err := checkInstallationID(id); err != nil {
		return "", fmt.Errorf("deriving the installation ID from the kube-system UID %q: %w (set --installation-id explicitly)", clusterUID, err)
	}
	return id, nil
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// defaultInstallationID reads the kube-system namespace's UID and derives
// the installation ID from it, the operator's namespace and its class.
func defaultInstallationID(ctx context.Context, cfg *rest.Config, namespace, class string) (string, error) {
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return "", err
	}
	ns := &corev1.Namespace{}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Get(ctx, client.ObjectKey{Name: "kube-system"}, ns); err != nil {
		return "", fmt.Errorf("deriving --installation-id from the kube-system namespace: %w (set --installation-id explicitly)", err)
	}
	return deriveInstallationID(string(ns.UID), namespace, class)
}

// operatorNamespace is the namespace the operator runs in: POD_NAMESPACE
// (main passes it), else the Pod's service-account namespace file, else ""
// (a run outside the cluster).
func operatorNamespace(podNamespace, saFile string) string {
	if podNamespace != "" {
		return podNamespace
	}
	b, err := os.ReadFile(saFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// leaderElectionID names the leader-election Lease: the historic name for
// the default class, and one per class otherwise, so that two installations
// of different classes in one namespace do not elect one leader between
// them.
func leaderElectionID(class string) string {
	const base = "egress-proxies-operator.proxy-operator.dev"
	if class == "" {
		return base
	}
	return class + "." + base
}

// checkScope refuses a malformed --proxy-class, --watch-namespaces or
// --installation-id before anything starts.
func checkScope(o Options) error {
	var errs []error
	if o.ProxyClass != "" {
		for _, msg := range validation.IsDNS1123Label(o.ProxyClass) {
			errs = append(errs, fmt.Errorf("--proxy-class %q: %s", o.ProxyClass, msg))
		}
	}
	for _, ns := range o.Namespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, fmt.Errorf("--watch-namespaces: %q: %s", ns, msg))
		}
	}
	if o.InstallationID != "" {
		if err := checkInstallationID(o.InstallationID); err != nil {
			errs = append(errs, fmt.Errorf("--installation-id: %w", err))
		}
	}
	return errors.Join(errs...)
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
