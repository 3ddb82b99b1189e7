package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// Want is what check requires of an archive.
type Want struct {
	Platform   string
	User       string
	Entrypoint []string
	// Labels are K=V (exact value) or K (any non-empty value).
	Labels []string
	// Present and Absent are paths that must or must not be in the layer.
	Present, Absent []string
}

// Check returns every way info differs from w (empty when none), plus the
// layer-wide rules all our images keep: mtime 0 and no setuid/setgid file.
func Check(info *Info, w Want) []string {
	var bad []string
	c := info.Config
	if w.Platform != "" {
		got := c.OS + "/" + c.Architecture
		if info.Platform == nil || info.Platform.OS+"/"+info.Platform.Architecture != w.Platform || got != w.Platform {
			bad = append(bad, fmt.Sprintf("platform: config %s, index %v, want %s", got, info.Platform, w.Platform))
		}
	}
	if w.User != "" && c.Config.User != w.User {
		bad = append(bad, fmt.Sprintf("user %q, want %q", c.Config.User, w.User))
	}
	if len(w.Entrypoint) > 0 && !slices.Equal(c.Config.Entrypoint, w.Entrypoint) {
		bad = append(bad, fmt.Sprintf("entrypoint %q, want %q", c.Config.Entrypoint, w.Entrypoint))
	}
	for _, l := range w.Labels {
		k, v, exact := strings.Cut(l, "=")
		got, ok := c.Config.Labels[k]
		switch {
		case !ok || got == "":
			bad = append(bad, fmt.Sprintf("label %s is missing", k))
		case exact && got != v:
			bad = append(bad, fmt.Sprintf("label %s=%q, want %q", k, got, v))
		}
	}
	have := map[string]bool{}
	for _, f := range info.Files {
		have[f.Path] = true
		if f.MTime != 0 {
			bad = append(bad, fmt.Sprintf("%s has mtime %d, want 0", f.Path, f.MTime))
		}
		if f.Mode&0o6000 != 0 {
			bad = append(bad, fmt.Sprintf("%s is setuid or setgid (mode %o)", f.Path, f.Mode))
		}
	}
	for _, p := range w.Present {
		if !have[p] {
			bad = append(bad, p+" is not in the image")
		}
	}
	for _, p := range w.Absent {
		if have[p] {
			bad = append(bad, p+" is in the image")
		}
	}
	return bad
}

func runCheck(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var w Want
	var entrypoint, labels, present, absent listFlag
	fs.StringVar(&w.Platform, "platform", "", "os/architecture the config and the index must name")
	fs.StringVar(&w.User, "user", "", "the config's user")
	fs.Var(&entrypoint, "entrypoint", "entrypoint argument (repeat; the whole entrypoint)")
	fs.Var(&labels, "label", "K=V or K (any non-empty value) (repeat)")
	fs.Var(&present, "present", "path that must be in the layer (repeat)")
	fs.Var(&absent, "absent", "path that must not be in the layer (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: imagebuild check [flags] FILE")
	}
	w.Entrypoint, w.Labels, w.Present, w.Absent = entrypoint, labels, present, absent
	info, err := Inspect(fs.Arg(0))
	if err != nil {
		return err
	}
	if bad := Check(info, w); len(bad) > 0 {
		return fmt.Errorf("%s (%s):\n  %s", fs.Arg(0), info.Digest, strings.Join(bad, "\n  "))
	}
	fmt.Printf("%s: %s %s ok\n", fs.Arg(0), info.Ref, info.Digest)
	return nil
}
