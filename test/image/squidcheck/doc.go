// Package squidcheck holds the check that the Squid image hack/image/squid.sh
// builds runs the way the kubernetes provider runs it: its test takes the
// squid.conf and the Pod spec from the provider itself (Create against a
// real API server), runs the image in containerd with the Pod's command,
// user, read-only root and volumes, and fetches a page through it. It needs
// a containerd with the image imported, so it runs from `make image-test`
// (hack/image/test.sh) and skips otherwise.
package squidcheck
