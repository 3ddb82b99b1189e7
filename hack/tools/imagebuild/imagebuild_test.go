package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture writes a small rootfs source tree and returns its directory.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"manager":         "#!binary\n",
		"share/a.conf":    "a\n",
		"share/sub/b.gif": "GIF89a",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func specLines(dir string) []string {
	return []string{
		"file /manager 0755 0:0 " + filepath.Join(dir, "manager"),
		"tree /usr/share/x " + filepath.Join(dir, "share"),
		"dir /tmp 1777 0:0",
		"dir /home/nonroot 0700 65532:65532",
		"symlink /usr/bin/m ../../manager",
	}
}

func options() Options {
	return Options{
		Ref:        "egress-proxies-operator:dev",
		Platform:   "linux/amd64",
		User:       "65532:65532",
		Entrypoint: []string{"/manager"},
		Labels:     map[string]string{"org.opencontainers.image.version": "v1.2.3", "org.opencontainers.image.revision": "abc"},
		Created:    time.Unix(1700000000, 0).UTC(),
	}
}

func build(t *testing.T, lines []string, o Options) (digest string, archive []byte) {
	t.Helper()
	spec, err := ParseSpec(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "img.oci.tar")
	digest, err = Build(spec, o, out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return digest, b
}

// The same inputs give the same digest and the same archive bytes although
// the host files' mtimes, the spec's order and the build's directory differ;
// a changed content byte, label or time gives another digest.
func TestBuildIsReproducible(t *testing.T) {
	dir := fixture(t)
	lines := specLines(dir)
	d1, a1 := build(t, lines, options())

	for _, p := range []string{"manager", "share/a.conf", "share/sub", "share"} {
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(filepath.Join(dir, p), later, later); err != nil {
			t.Fatal(err)
		}
	}
	reversed := slices.Clone(lines)
	slices.Reverse(reversed)
	d2, a2 := build(t, reversed, options())
	if d1 != d2 || !bytes.Equal(a1, a2) {
		t.Fatalf("second build differs: digest %s then %s, archives equal %v", d1, d2, bytes.Equal(a1, a2))
	}

	changed := map[string]func(*Options){
		"label":   func(o *Options) { o.Labels["org.opencontainers.image.revision"] = "def" },
		"created": func(o *Options) { o.Created = o.Created.Add(time.Second) },
		"user":    func(o *Options) { o.User = "0:0" },
	}
	for name, change := range changed {
		o := options()
		change(&o)
		if d, _ := build(t, lines, o); d == d1 {
			t.Errorf("changing the %s kept digest %s", name, d)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "share/a.conf"), []byte("b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, _ := build(t, lines, options()); d == d1 {
		t.Errorf("changing a file's content kept digest %s", d)
	}
}

// The config and the layer say what the options and the spec say, and Check
// passes on them and names what it was told to expect otherwise.
func TestBuildConfigAndLayer(t *testing.T) {
	dir := fixture(t)
	spec, err := ParseSpec(strings.NewReader(strings.Join(specLines(dir), "\n")))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "img.oci.tar")
	digest, err := Build(spec, options(), out)
	if err != nil {
		t.Fatal(err)
	}
	info, err := Inspect(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Digest != digest || info.Ref != "docker.io/library/egress-proxies-operator:dev" {
		t.Errorf("index: ref %q digest %s, want docker.io/library/egress-proxies-operator:dev %s", info.Ref, info.Digest, digest)
	}
	if !info.Config.Created.Time.Equal(options().Created) || info.Config.History[0].Created.Time.Unix() != 1700000000 {
		t.Errorf("created %v, history %v: want SOURCE_DATE_EPOCH 1700000000", info.Config.Created, info.Config.History)
	}
	got := map[string]File{}
	var order []string
	for _, f := range info.Files {
		got[f.Path] = f
		order = append(order, f.Path)
	}
	want := []string{"/home", "/home/nonroot", "/manager", "/tmp", "/usr", "/usr/bin", "/usr/bin/m",
		"/usr/share", "/usr/share/x", "/usr/share/x/a.conf", "/usr/share/x/sub", "/usr/share/x/sub/b.gif"}
	if !slices.Equal(order, want) {
		t.Errorf("layer entries\n%q\nwant\n%q", order, want)
	}
	for path, w := range map[string]File{
		"/manager":            {Type: "file", Mode: 0o755},
		"/tmp":                {Type: "dir", Mode: 0o1777},
		"/home/nonroot":       {Type: "dir", Mode: 0o700, UID: 65532, GID: 65532},
		"/usr/bin/m":          {Type: "symlink", Mode: 0o777, Link: "../../manager"},
		"/usr/share/x/a.conf": {Type: "file", Mode: 0o644},
	} {
		g := got[path]
		if g.Type != w.Type || g.Mode != w.Mode || g.UID != w.UID || g.GID != w.GID || g.Link != w.Link {
			t.Errorf("%s: %+v, want %+v", path, g, w)
		}
	}
	ok := Want{Platform: "linux/amd64", User: "65532:65532", Entrypoint: []string{"/manager"},
		Labels:  []string{"org.opencontainers.image.version=v1.2.3", "org.opencontainers.image.revision"},
		Present: []string{"/manager"}, Absent: []string{"/bin/sh"}}
	if bad := Check(info, ok); len(bad) > 0 {
		t.Errorf("Check: %q", bad)
	}
	wrong := Want{Platform: "linux/arm64", User: "0:0", Entrypoint: []string{"/bin/sh"},
		Labels:  []string{"org.opencontainers.image.version=v9", "org.opencontainers.image.source"},
		Present: []string{"/bin/sh"}, Absent: []string{"/manager"}}
	if bad := Check(info, wrong); len(bad) != 7 {
		t.Errorf("Check of seven wrong expectations found %d: %q", len(bad), bad)
	}
}

func TestParseSpecErrors(t *testing.T) {
	dir := fixture(t)
	for _, tc := range []struct{ spec, want string }{
		{"dir tmp 1777 0:0", "not absolute"},
		{"dir /tmp 1777 root:root", "numeric uid:gid"},
		{"dir /tmp 999 0:0", "octal"},
		{"file /m 0755 0:0 " + filepath.Join(dir, "nope"), "no such file"},
		{"file /m 0755 0:0 " + dir, "not a regular file"},
		{"dir /tmp 1777 0:0\ndir /tmp 0755 0:0", "listed twice"},
		{"link /a b", "unknown kind"},
		{"symlink /a", "takes 2 fields"},
	} {
		_, err := ParseSpec(strings.NewReader(tc.spec))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"egress-proxies-operator:dev":         "docker.io/library/egress-proxies-operator:dev",
		"egress-proxies-operator/squid:5.7-2": "docker.io/egress-proxies-operator/squid:5.7-2",
		"registry.example/team/squid:1":       "registry.example/team/squid:1",
		"localhost:5000/squid:1":              "localhost:5000/squid:1",
		"localhost/squid:1":                   "localhost/squid:1",
	} {
		if got, err := NormalizeRef(in); err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "squid", "localhost:5000/squid", "squid:", "squid@sha256:00"} {
		if got, err := NormalizeRef(in); err == nil {
			t.Errorf("NormalizeRef(%q) = %q, want an error", in, got)
		}
	}
}
