package nocloud

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// fullSeed holds every file, with content a careless writer would mangle:
// no trailing newline, CRLF, UTF-8, a NUL, more than one sector.
func fullSeed() Seed {
	return Seed{
		InstanceID:    "proxy-default-web-0a1b2c3d4e",
		LocalHostname: "proxy-default-web-0a1b2c3d4e",
		UserData:      provider.Sensitive("#cloud-config\npackages: [squid]\nwrite_files:\n- path: /etc/motd\n  content: \"h\u00e9llo \u2603\"\r\n" + strings.Repeat("# padding line\n", 300) + "\x00end"),
		NetworkConfig: "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n",
		VendorData:    GuestAgentVendorData,
	}
}

func TestNoCloudSeed_ReadBackByRealISOReaders(t *testing.T) {
	seeds := map[string]Seed{
		"all four files": fullSeed(),
		"user-data and meta-data only": {
			InstanceID: "i-1", LocalHostname: "h-1", UserData: "#cloud-config\n{}\n",
		},
		// go-diskfs v1.9.4 pads the last file with a whole zero sector when
		// its size is a multiple of 2 KiB (0 included), over the Joliet root.
		"empty user-data": {InstanceID: "i-2", LocalHostname: "h-2"},
		"user-data of exactly one sector, the last file": {
			InstanceID: "i-3", LocalHostname: "h-3",
			UserData: provider.Sensitive("#cloud-config\n" + strings.Repeat("#", sectorSize-15) + "\n"),
		},
		"network-config of exactly two sectors, not the last file": {
			InstanceID: "i-4", LocalHostname: "h-4", UserData: "#cloud-config\n",
			NetworkConfig: provider.Sensitive("version: 2\n" + strings.Repeat("#", 2*sectorSize-12) + "\n"),
		},
	}
	for name, s := range seeds {
		img, err := Build(s)
		if err != nil {
			t.Fatalf("%s: Build: %v", name, err)
		}
		if len(img)%sectorSize != 0 {
			t.Errorf("%s: image is %d bytes, not whole 2 KiB sectors", name, len(img))
		}
		path := writeImage(t, img)
		want := wantFiles(t, s)
		for _, r := range readers {
			t.Run(name+"/"+r.name, func(t *testing.T) {
				if p := r.read(t, path).problems(want); len(p) > 0 {
					t.Fatalf("%s reads the seed wrong:\n%s", r.name, strings.Join(p, "\n"))
				}
			})
		}
	}
}

// The check above must be able to fail: images that lack what a seed needs
// are reported by both readers.
func TestNoCloudSeed_ReadBackCatchesBrokenImages(t *testing.T) {
	s := fullSeed()
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	good := imageOptions{label: VolumeLabel, joliet: true, rockRidge: true, normalize: true}
	tests := []struct {
		name    string
		opts    func(o imageOptions) imageOptions
		files   []File
		problem string
	}{
		{name: "without Rock Ridge", opts: func(o imageOptions) imageOptions { o.rockRidge = false; return o }, problem: "no Rock Ridge"},
		{name: "without Joliet", opts: func(o imageOptions) imageOptions { o.joliet = false; return o }, problem: "no Joliet"},
		{name: "without either: ISO 8.3 names only", opts: func(o imageOptions) imageOptions { o.joliet, o.rockRidge = false, false; return o }, problem: "names"},
		{name: "wrong label", opts: func(o imageOptions) imageOptions { o.label = "CIDATA2"; return o }, problem: "volume label"},
		{name: "content differs", files: append([]File{{Name: FileMetaData, Content: "instance-id: other\n"}}, files[1:]...), problem: "content of meta-data differs"},
		{name: "a file missing", files: files[:3], problem: "names"},
	}
	want := wantFiles(t, s)
	for _, tt := range tests {
		o, fs := good, files
		if tt.opts != nil {
			o = tt.opts(o)
		}
		if tt.files != nil {
			fs = tt.files
		}
		img, err := buildImage(fs, o)
		if err != nil {
			t.Fatalf("%s: buildImage: %v", tt.name, err)
		}
		path := writeImage(t, img)
		for _, r := range readers {
			t.Run(tt.name+"/"+r.name, func(t *testing.T) {
				p := r.read(t, path).problems(want)
				if !strings.Contains(strings.Join(p, "\n"), tt.problem) {
					t.Fatalf("%s: problems %q, want one about %q", r.name, p, tt.problem)
				}
			})
		}
	}
}

// The image's attributes are fixed, whatever the process, its umask, its
// time zone or the time: root-owned read-only files dated SeedTime.
func TestNoCloudSeed_ImageAttributesAreFixed(t *testing.T) {
	bin := requireTool(t, "xorriso")
	t.Setenv("TZ", "UTC") // xorriso prints dates in its own zone
	img, err := Build(fullSeed())
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, bin, "-indev", writeImage(t, img), "-lsl", "/", "--", "-pvd_info")
	for _, name := range []string{"meta-data", "network-config", "user-data", "vendor-data"} {
		line := regexp.MustCompile(`(?m)^-r--------\s+1\s+0\s+0\s+\d+\s+Jan\s+1\s+1970\s+'` + name + `'$`)
		if !line.MatchString(out) {
			t.Errorf("xorriso -lsl does not show %s as -r-------- 1 0 0 <size> Jan 1 1970:\n%s", name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^dr-x------\s+\d+\s+0\s+0\s+\d+\s+Jan\s+1\s+1970\s+'/'$`).MatchString(run(t, bin, "-indev", writeImage(t, img), "-lsdl", "/", "--")) {
		t.Errorf("xorriso -lsdl / does not show the root as dr-x------ <n> 0 0 ... Jan 1 1970")
	}
	for _, field := range []string{"Creation Time: 1970010100000000", "Modif. Time  : 1970010100000000"} {
		if !strings.Contains(out, field) {
			t.Errorf("xorriso -pvd_info lacks %q:\n%s", field, out)
		}
	}
}

// Same seed, same bytes: a build a wall-clock second later, in another time
// zone, is byte-identical; without the normalization it is not (so the
// check can fail), and another seed gives other bytes.
func TestNoCloudSeed_DeterministicBuild(t *testing.T) {
	s := fullSeed()
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	raw := imageOptions{label: VolumeLabel, joliet: true, rockRidge: true, normalize: false}

	first, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	firstRaw, err := buildImage(files, raw)
	if err != nil {
		t.Fatal(err)
	}

	started := time.Now().Unix()
	testenv.Eventually(t, "the wall clock moves to the next second", func() bool { return time.Now().Unix() > started })
	local := time.Local
	time.Local = time.FixedZone("UTC+5:30", 5*3600+1800)
	t.Cleanup(func() { time.Local = local })

	second, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	secondRaw, err := buildImage(files, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("two builds of the same seed differ (%d and %d bytes)", len(first), len(second))
	}
	if bytes.Equal(firstRaw, secondRaw) {
		t.Fatalf("the library's own output did not change with the time: this test would not catch a lost normalization")
	}

	other := s
	other.UserData = "#cloud-config\n"
	third, err := Build(other)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first, third) {
		t.Fatalf("two different seeds gave the same image")
	}
}

func TestNoCloudSeed_ConcurrentBuilds(t *testing.T) {
	want, err := Build(fullSeed())
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	imgs := make(chan []byte, 8)
	for range 8 {
		go func() {
			img, err := Build(fullSeed())
			errs <- err
			imgs <- img
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(<-imgs, want) {
			t.Fatal("a concurrent build gave other bytes")
		}
	}
}

func TestNoCloudSeed_MemoryImageKeepsWrittenBytes(t *testing.T) {
	m := &memoryImage{}
	for _, w := range []struct {
		off int64
		p   []byte
	}{
		{0, []byte("abcd")},
		{2, []byte{0, 0}},     // a zero pad over written bytes: kept
		{6, []byte{0, 0}},     // a zero pad past the end: grows
		{1, []byte{'X', 0}},   // real data with a zero: written as given
		{4, []byte{'e', 'f'}}, // fills the grown gap
	} {
		if n, err := m.WriteAt(w.p, w.off); err != nil || n != len(w.p) {
			t.Fatalf("WriteAt(%q, %d) = %d, %v", w.p, w.off, n, err)
		}
	}
	if want := "aX\x00def\x00\x00"; string(m.buf) != want {
		t.Fatalf("image = %q, want %q", m.buf, want)
	}
	got := make([]byte, 3)
	if n, err := m.ReadAt(got, 6); n != 2 || err == nil || string(got[:n]) != "\x00\x00" {
		t.Fatalf("ReadAt past the end = %d, %v, %q", n, err, got[:n])
	}
}
