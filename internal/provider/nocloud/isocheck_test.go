package nocloud

// The real check of the seed: the image is read back by the ISO readers
// Debian ships (isoinfo from genisoimage, and xorriso), never by go-diskfs
// itself, so a bug in the writer cannot hide behind the same library's reader.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// requireTool finds an ISO reader. A missing tool fails the test, so CI
// cannot pass by skipping; SKIP_ISO_TESTS=1 opts out explicitly.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("SKIP_ISO_TESTS") == "1" {
		t.Skipf("%s is not installed and SKIP_ISO_TESTS=1", name)
	}
	t.Fatalf("%s is not installed: run hack/install-test-deps.sh (genisoimage and xorriso), or set SKIP_ISO_TESTS=1 to skip the real ISO checks", name)
	return ""
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String() + stderr.String()
}

// wantFile is a file the seed must hold, as every reader must see it.
type wantFile struct {
	name    string
	content []byte
}

// isoView is what one reader reports about an image.
type isoView struct {
	label     string
	joliet    bool
	rockRidge bool
	// names and contents as seen through Rock Ridge and through Joliet
	rrFiles, jolietFiles map[string][]byte
}

// problems compares a view with the seed wanted; empty means the image is right.
func (v isoView) problems(want []wantFile) []string {
	var p []string
	if v.label != VolumeLabel {
		p = append(p, fmt.Sprintf("volume label %q, want %q", v.label, VolumeLabel))
	}
	if !v.joliet {
		p = append(p, "no Joliet")
	}
	if !v.rockRidge {
		p = append(p, "no Rock Ridge")
	}
	var names []string
	for _, w := range want {
		names = append(names, w.name)
	}
	slices.Sort(names)
	for _, tree := range []struct {
		name  string
		files map[string][]byte
	}{{"Rock Ridge", v.rrFiles}, {"Joliet", v.jolietFiles}} {
		var got []string
		for n := range tree.files {
			got = append(got, n)
		}
		slices.Sort(got)
		if !slices.Equal(got, names) {
			p = append(p, fmt.Sprintf("%s names %q, want %q", tree.name, got, names))
			continue
		}
		for _, w := range want {
			if !bytes.Equal(tree.files[w.name], w.content) {
				p = append(p, fmt.Sprintf("%s content of %s differs (%d bytes, want %d)", tree.name, w.name, len(tree.files[w.name]), len(w.content)))
			}
		}
	}
	return p
}

var isoinfoLabel = regexp.MustCompile(`(?m)^Volume id: (.*)$`)

// readWithIsoinfo reads an image with genisoimage's isoinfo: -d for the
// volume descriptors, -f for the names, -x for each file's bytes.
func readWithIsoinfo(t *testing.T, img string) isoView {
	t.Helper()
	bin := requireTool(t, "isoinfo")
	d := run(t, bin, "-d", "-i", img)
	v := isoView{
		joliet:    strings.Contains(d, "Joliet with UCS level"),
		rockRidge: strings.Contains(d, "Rock Ridge signatures version") && !strings.Contains(d, "NO Rock Ridge"),
	}
	if m := isoinfoLabel.FindStringSubmatch(d); m != nil {
		v.label = strings.TrimSpace(m[1])
	}
	tree := func(flag string) map[string][]byte {
		files := map[string][]byte{}
		for _, line := range strings.Split(run(t, bin, flag, "-f", "-i", img), "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			out, err := exec.Command(bin, flag, "-x", line, "-i", img).Output()
			if err != nil {
				t.Fatalf("isoinfo %s -x %s: %v", flag, line, err)
			}
			files[strings.TrimPrefix(line, "/")] = out
		}
		return files
	}
	v.rrFiles = tree("-R")
	if v.joliet { // isoinfo -J fails without a Joliet tree; no names is then the finding
		v.jolietFiles = tree("-J")
	}
	return v
}

var (
	xorrisoOffers = regexp.MustCompile(`(?m)^ISO offers\s*:(.*)$`)
	xorrisoLabel  = regexp.MustCompile(`(?m)^Volume Id\s*:(.*)$`)
)

// readWithXorriso reads an image with xorriso: -toc says which trees it
// offers, -pvd_info the label, and -osirrox extracts the tree -read_fs
// asks for (Rock Ridge with nojoliet, Joliet with norock).
func readWithXorriso(t *testing.T, img string) isoView {
	t.Helper()
	bin := requireTool(t, "xorriso")
	var v isoView
	toc := run(t, bin, "-indev", img, "-toc", "-pvd_info")
	if m := xorrisoOffers.FindStringSubmatch(toc); m != nil {
		offers := strings.Fields(m[1])
		v.rockRidge = slices.Contains(offers, "Rock_Ridge")
		v.joliet = slices.Contains(offers, "Joliet")
	}
	if m := xorrisoLabel.FindStringSubmatch(toc); m != nil {
		v.label = strings.TrimSpace(m[1])
	}
	extract := func(pre ...string) map[string][]byte {
		dir := filepath.Join(t.TempDir(), "x")
		args := append(pre, "-indev", img, "-osirrox", "on", "-extract", "/", dir)
		run(t, bin, args...)
		// The seed's modes are read-only; let t.TempDir's cleanup remove it.
		t.Cleanup(func() {
			_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o700) })
		})
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("read extracted tree: %v", err)
		}
		files := map[string][]byte{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatalf("read extracted %s: %v", e.Name(), err)
			}
			files[e.Name()] = b
		}
		return files
	}
	// -read_fs picks the tree; without it, xorriso falls back to ECMA-119 names.
	v.rrFiles = extract("-read_fs", "nojoliet")
	v.jolietFiles = extract("-read_fs", "norock")
	return v
}

// readers are the real ISO readers every seed image is checked with.
var readers = []struct {
	name string
	read func(t *testing.T, img string) isoView
}{
	{"isoinfo", readWithIsoinfo},
	{"xorriso", readWithXorriso},
}

func writeImage(t *testing.T, img []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(p, img, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantFiles(t *testing.T, s Seed) []wantFile {
	t.Helper()
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	var w []wantFile
	for _, f := range files {
		w = append(w, wantFile{name: f.Name, content: []byte(f.Content.Reveal())})
	}
	return w
}
