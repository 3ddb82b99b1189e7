// Command imagebuild writes a single-layer OCI image archive from a rootfs
// spec, with no registry, no daemon and no root. It is how `make image` and
// `make image-squid` build the operator's and the Squid image
// (docs/images.md).
//
// Why a small program on go-containerregistry rather than ko, crane,
// buildah or umoci:
//
//   - Reproducible by construction: we write every tar entry ourselves
//     (sorted paths, mtime 0, uid/gid from the spec, no user/group names),
//     the config's timestamps are SOURCE_DATE_EPOCH, and the archive's own
//     tar is written the same way, so the same inputs give the same manifest
//     digest and the same archive bytes. go-containerregistry computes the
//     digests, the config and the manifest (OCI media types).
//   - No daemon, no registry, no root: it reads host files and writes one
//     file. crane sets the platform, user and entrypoint only through a
//     registry (crane mutate; `crane append -o` leaves os/architecture
//     empty, which `ctr images import` filters out). ko builds Go binaries
//     only (not the Squid image) and pulls its base from a registry.
//     buildah needs user namespaces or root and its own storage; umoci needs
//     an unpacked rootfs with the right owners, i.e. root or a rootless
//     mapping, and still leaves file mtimes to the filesystem.
//   - Labels, user, entrypoint, env and platform are plain flags written into
//     the config, with the platform also on the index descriptor, so
//     `ctr images import` keeps the image on a linux/amd64 host.
//
// The version is pinned by this tools module (go.mod/go.sum), and the
// binary is cached outside the work tree keyed by the hash of this
// directory (hack/image/imagebuild.sh).
//
// Usage:
//
//	imagebuild build --spec FILE --out FILE --ref REF [--platform linux/amd64]
//	    [--user U:G] [--entrypoint ARG]... [--cmd ARG]... [--env K=V]...
//	    [--label K=V]... [--workdir DIR]
//	imagebuild inspect FILE
//	imagebuild check [--platform P] [--user U] [--entrypoint ARG]...
//	    [--label K[=V]]... [--present PATH]... [--absent PATH]... FILE
//
// build prints the manifest digest (what containerd and a registry call the
// image's digest) on stdout. inspect prints the archive's reference,
// digest, config and file list as JSON. check fails, naming each
// difference, unless the archive matches the flags, its entries all have
// mtime 0 and none is setuid or setgid.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: imagebuild build|inspect|check ...")
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:])
	case "inspect":
		if len(args) != 2 {
			return fmt.Errorf("usage: imagebuild inspect FILE")
		}
		info, err := Inspect(args[1])
		if err != nil {
			return err
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	case "check":
		return runCheck(args[1:])
	default:
		return fmt.Errorf("unknown command %q: want build, inspect or check", args[0])
	}
}

func runBuild(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var o Options
	var specPath, out string
	var entrypoint, cmd, env, labels listFlag
	fs.StringVar(&specPath, "spec", "", "rootfs spec file (see spec.go)")
	fs.StringVar(&out, "out", "", "OCI archive to write")
	fs.StringVar(&o.Ref, "ref", "", "image reference, e.g. egress-proxies-operator:dev (normalized as containerd does)")
	fs.StringVar(&o.Platform, "platform", "linux/amd64", "os/architecture[/variant]")
	fs.StringVar(&o.User, "user", "", "user[:group] the container runs as")
	fs.StringVar(&o.WorkingDir, "workdir", "", "working directory")
	fs.Var(&entrypoint, "entrypoint", "entrypoint argument (repeat)")
	fs.Var(&cmd, "cmd", "cmd argument (repeat)")
	fs.Var(&env, "env", "K=V environment variable (repeat)")
	fs.Var(&labels, "label", "K=V label (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if specPath == "" || out == "" || o.Ref == "" {
		return fmt.Errorf("build needs --spec, --out and --ref")
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	o.Created = created
	o.Entrypoint, o.Cmd, o.Env = entrypoint, cmd, env
	o.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("label %q: want K=V", l)
		}
		o.Labels[k] = v
	}
	f, err := os.Open(specPath)
	if err != nil {
		return err
	}
	defer f.Close()
	spec, err := ParseSpec(f)
	if err != nil {
		return fmt.Errorf("%s: %w", specPath, err)
	}
	digest, err := Build(spec, o, out)
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

// sourceDateEpoch is the image's creation time. It is required, not
// defaulted to now: a build that silently used the clock would not be
// reproducible.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH is not set (seconds since 1970; hack/image sets it from the last commit)")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}
