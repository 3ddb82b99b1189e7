package libvirt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// imageBody is a deterministic image of n bytes (not a real qcow2: the
// fake stores whatever it is sent) and its digest.
func imageBody(n int) ([]byte, string) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// imageFixture is a provider over one fake host, its pooled connection and
// pool, and an image server on 127.0.0.1.
type imageFixture struct {
	t    *testing.T
	h    *fakeHost
	p    *Provider
	b    backend
	pool libvirt.StoragePool
	body []byte
	img  imageRef
	srv  *httptest.Server
	gets atomic.Int32
	// uploaded counts the bytes the fake's uploads have read so far.
	uploaded atomic.Int64
	// reached is closed once uploaded reaches reachAt (when set).
	reachAt int64
	reached chan struct{}
	once    sync.Once
}

// newImageFixture serves body with handler (nil: a plain 200 with
// Content-Length) and points img at it.
func newImageFixture(t *testing.T, size int, handler func(f *imageFixture, w http.ResponseWriter, r *http.Request)) *imageFixture {
	t.Helper()
	f := &imageFixture{t: t, h: newFakeHost("h1"), reached: make(chan struct{})}
	f.body, f.img.SHA256 = imageBody(size)
	f.img.Key, f.img.Format, f.img.Firmware = "debian-12", "qcow2", "bios"
	f.p = newFakeProvider(t, f.h)
	// Every connection's uploads are counted as the fake reads them.
	f.p.table = newHostTable(func(ctx context.Context, hc Host) (backend, error) {
		b, err := f.h.connect(ctx, hc)
		if err != nil {
			return nil, err
		}
		return &countedUploads{backend: b, f: f}, nil
	})
	if handler == nil {
		handler = func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
			http.ServeContent(w, r, "image.qcow2", time.Time{}, bytes.NewReader(f.body))
		}
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			f.gets.Add(1)
		}
		handler(f, w, r)
	}))
	t.Cleanup(f.srv.Close)
	f.p.http = f.srv.Client()
	f.img.URL = f.srv.URL + "/images/debian-12.qcow2?token=s3cr3t-t0ken"
	ctx := context.Background()
	var err error
	if f.b, err = f.p.table.get(ctx, f.p.hosts[0]); err != nil {
		t.Fatal(err)
	}
	if f.pool, err = f.b.StoragePoolLookupByName(ctx, DefaultPool); err != nil {
		t.Fatal(err)
	}
	return f
}

// countedUploads counts what the fake's uploads read.
type countedUploads struct {
	backend
	f *imageFixture
}

func (c *countedUploads) StorageVolUpload(ctx context.Context, vol libvirt.StorageVol, r io.Reader, length uint64) error {
	return c.backend.StorageVolUpload(ctx, vol, &countingReader{r: r, f: c.f}, length)
}

type countingReader struct {
	r io.Reader
	f *imageFixture
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if total := c.f.uploaded.Add(int64(n)); c.f.reachAt > 0 && total >= c.f.reachAt {
		c.f.once.Do(func() { close(c.f.reached) })
	}
	return n, err
}

func (f *imageFixture) ensure(ctx context.Context, progress func(string)) (libvirt.StorageVol, error) {
	return f.p.ensureImage(ctx, f.p.hosts[0], f.b, f.pool, f.img, progress)
}

// volumes are the names in the fake's pool.
func (f *imageFixture) volumes() []string {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	return config.SortedKeys(f.h.pools[DefaultPool].vols)
}

func (f *imageFixture) volume(name string) *fakeVol {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	return f.h.pools[DefaultPool].vols[name]
}

// putVolume puts a volume into the fake's pool directly.
func (f *imageFixture) putVolume(name string, data []byte) {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	f.h.pools[DefaultPool].vols[name] = &fakeVol{vol: libvirt.StorageVol{Pool: DefaultPool, Name: name, Key: "/var/lib/libvirt/images/" + name},
		capacity: uint64(len(data)), data: data}
}

// mustBeCached checks that the image and its marker are in the pool, with
// the image's content.
func (f *imageFixture) mustBeCached(vol libvirt.StorageVol) {
	f.t.Helper()
	if vol.Name != imageVolumeName(f.img) || vol.Pool != DefaultPool {
		f.t.Fatalf("returned volume %+v, want %s in %s", vol, imageVolumeName(f.img), DefaultPool)
	}
	if got, want := f.volumes(), []string{imageMarkerName(f.img), imageVolumeName(f.img)}; !slices.Equal(got, sortedCopy(want)) {
		f.t.Fatalf("pool holds %v, want %v", got, want)
	}
	if v := f.volume(imageVolumeName(f.img)); !bytes.Equal(v.data, f.body) {
		f.t.Fatalf("the image volume holds %d bytes, not the %d of the image", len(v.data), len(f.body))
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// volumeCapacity is the capacity the volume was created with (from the
// XML the fake was given).
func volumeCapacity(t *testing.T, v *fakeVol) uint64 {
	t.Helper()
	m := regexp.MustCompile(`<capacity[^>]*>(\d+)</capacity>`).FindStringSubmatch(v.xml)
	if m == nil {
		t.Fatalf("no capacity in %s", v.xml)
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func withinTest(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The cache's names carry the digest and are never taken for an
// instance's volumes (which ListSecondary and Delete find by name).
func TestImageVolumeNamesAreNotInstanceVolumes(t *testing.T) {
	img := imageRef{Key: "debian-12", SHA256: strings.Repeat("AB", 32), Format: "qcow2"}
	digest := strings.Repeat("ab", 32)
	if got, want := imageVolumeName(img), "egress-proxy-image_"+digest+".qcow2"; got != want {
		t.Errorf("imageVolumeName = %q, want %q", got, want)
	}
	if got, want := imageMarkerName(img), "egress-proxy-image_"+digest+".complete"; got != want {
		t.Errorf("imageMarkerName = %q, want %q", got, want)
	}
	raw := imageRef{SHA256: digest, Format: "raw"}
	for _, name := range []string{imageVolumeName(img), imageMarkerName(img), imageVolumeName(raw)} {
		if v, ok := parseVolumeName(name); ok {
			t.Errorf("parseVolumeName(%q) = %+v, an instance volume", name, v)
		}
	}
	// The control: an instance's own volume still parses.
	if _, ok := parseVolumeName(overlayName("proxy-a", "test", "uid-1")); !ok {
		t.Error("an overlay's name no longer parses")
	}
}

// An image counts as cached only with its marker: an image volume alone
// is a cut-off upload, a marker alone a leftover.
func TestCachedImageNeedsImageAndMarker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vols  []string
		found bool
	}{
		{"both", []string{"image", "marker"}, true},
		{"image without marker (a cut-off upload)", []string{"image"}, false},
		{"marker without image", []string{"marker"}, false},
		{"neither", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newImageFixture(t, 1000, nil)
			for _, v := range tc.vols {
				name := map[string]string{"image": imageVolumeName(f.img), "marker": imageMarkerName(f.img)}[v]
				f.putVolume(name, []byte("x"))
			}
			vol, found, err := f.p.cachedImage(context.Background(), f.b, f.pool, f.img)
			if err != nil || found != tc.found {
				t.Fatalf("found %v, err %v; want found %v", found, err, tc.found)
			}
			if found && vol.Name != imageVolumeName(f.img) {
				t.Fatalf("volume %+v", vol)
			}
		})
	}
}

// A lookup that fails for another reason than absence is an error, not
// "not cached" (which would start a download over a good image).
func TestCachedImageLookupFailureIsAnError(t *testing.T) {
	f := newImageFixture(t, 1000, nil)
	f.h.failNext("StorageVolLookupByName", lvErr(libvirt.ErrInternalError, "internal error: pool busy"))
	_, found, err := f.p.cachedImage(context.Background(), f.b, f.pool, f.img)
	if found || !errors.Is(err, provider.ErrTransient) {
		t.Fatalf("found %v, err %v", found, err)
	}
}

// The first ensureImage downloads; the second finds it cached and makes
// no HTTP request and no upload.
func TestImageDownloadedOnce(t *testing.T) {
	f := newImageFixture(t, 300<<10, nil)
	ctx := withinTest(t)
	vol, err := f.ensure(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.mustBeCached(vol)
	uploads := countCalls(f.h.callLog(), "StorageVolUpload")
	again, err := f.ensure(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again != vol || f.gets.Load() != 1 || countCalls(f.h.callLog(), "StorageVolUpload") != uploads {
		t.Fatalf("second ensureImage: volume %+v (first %+v), %d GETs, uploads %d -> %d",
			again, vol, f.gets.Load(), uploads, countCalls(f.h.callLog(), "StorageVolUpload"))
	}
}

func countCalls(log []string, rpc string) int {
	n := 0
	for _, c := range log {
		if strings.HasSuffix(c, ":"+rpc) {
			n++
		}
	}
	return n
}

// The body streams into the upload: the server holds the second half of
// the body until the upload has read the first, which a download that
// buffered the image before uploading it would never do.
func TestImageDownloadStreamsIntoTheUpload(t *testing.T) {
	const size = 4 << 20
	f := newImageFixture(t, size, func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		half := size / 2
		_, _ = w.Write(f.body[:half])
		w.(http.Flusher).Flush()
		select {
		case <-f.reached:
		case <-r.Context().Done(): // the client gave up: the test fails on its error
			return
		}
		_, _ = w.Write(f.body[half:])
	})
	f.reachAt = size / 2
	vol, err := f.ensure(withinTest(t), nil)
	if err != nil {
		t.Fatalf("%v (the upload had read %d bytes while the server held the rest)", err, f.uploaded.Load())
	}
	f.mustBeCached(vol)
}

// With Content-Length the volume is created that large and the upload
// announces the length; progress shows done/total.
func TestImageDownloadWithContentLength(t *testing.T) {
	const size = 2<<20 + 12345
	f := newImageFixture(t, size, nil)
	var progress []string
	vol, err := f.ensure(withinTest(t), func(s string) { progress = append(progress, s) })
	if err != nil {
		t.Fatal(err)
	}
	f.mustBeCached(vol)
	if c := volumeCapacity(t, f.volume(imageVolumeName(f.img))); c != size {
		t.Errorf("created with capacity %d, want the Content-Length %d", c, size)
	}
	if last := progress[len(progress)-1]; last != "downloading image debian-12: 2.0/2.0 MiB" {
		t.Errorf("final progress %q", last)
	}
}

// Seed gap (kvm2): "Content-Length is required for image downloads". A
// server that streams without one (chunked) is downloaded to its end,
// into a volume created with a placeholder capacity, and verified.
func TestGapContentLengthRequiredForImageDownloads(t *testing.T) {
	const size = 3<<20 + 777
	f := newImageFixture(t, size, func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
		for off := 0; off < size; off += 64 << 10 {
			_, _ = w.Write(f.body[off:min(off+64<<10, size)])
			w.(http.Flusher).Flush() // before any length is known: chunked
		}
	})
	var progress []string
	vol, err := f.ensure(withinTest(t), func(s string) { progress = append(progress, s) })
	if err != nil {
		t.Fatal(err)
	}
	f.mustBeCached(vol)
	if c := volumeCapacity(t, f.volume(imageVolumeName(f.img))); c != imagePlaceholderBytes {
		t.Errorf("created with capacity %d, want the placeholder %d", c, imagePlaceholderBytes)
	}
	if last := progress[len(progress)-1]; last != "downloading image debian-12: 3.0 MiB" {
		t.Errorf("final progress %q", last)
	}
	if !slices.Contains(f.h.callLog(), "1:StoragePoolRefresh") {
		t.Errorf("the pool was not refreshed after the upload (libvirt would keep the placeholder's size): %v", f.h.callLog())
	}
}

// A digest mismatch is Permanent, names the configured and the actual
// digest and the image, and leaves nothing in the pool.
func TestImageSHA256MismatchIsPermanentAndLeavesNothing(t *testing.T) {
	f := newImageFixture(t, 100<<10, nil)
	configured := strings.Repeat("0", 64)
	actual := f.img.SHA256
	f.img.SHA256 = configured
	_, err := f.ensure(withinTest(t), nil)
	if !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("%v, want Permanent", err)
	}
	for _, s := range []string{"sha256 mismatch", configured, actual, "debian-12", "h1"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	if v := f.volumes(); len(v) != 0 {
		t.Fatalf("pool holds %v after the mismatch", v)
	}
}

// HTTP refusals: 4xx Permanent (the status line in the message, the URL
// without its query), 408, 429 and 5xx Transient; nothing is left in the
// pool either way.
func TestImageHTTPStatusClasses(t *testing.T) {
	for _, tc := range []struct {
		code  int
		class error
	}{
		{http.StatusNotFound, provider.ErrPermanent},
		{http.StatusForbidden, provider.ErrPermanent},
		{http.StatusGone, provider.ErrPermanent},
		{http.StatusRequestTimeout, provider.ErrTransient},
		{http.StatusTooManyRequests, provider.ErrTransient},
		{http.StatusInternalServerError, provider.ErrTransient},
		{http.StatusServiceUnavailable, provider.ErrTransient},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			f := newImageFixture(t, 1000, func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
				http.Error(w, "body-sentinel", tc.code)
			})
			_, err := f.ensure(withinTest(t), nil)
			if provider.ClassOf(err) != tc.class {
				t.Fatalf("%v: class %s, want %v", err, provider.ClassName(err), tc.class)
			}
			status := fmt.Sprintf("%d %s", tc.code, http.StatusText(tc.code))
			if !strings.Contains(err.Error(), status) || !strings.Contains(err.Error(), f.srv.URL+"/images/debian-12.qcow2") {
				t.Errorf("%q lacks the status %q or the URL", err, status)
			}
			if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "body-sentinel") {
				t.Errorf("%q shows the URL's query or the body", err)
			}
			if v := f.volumes(); len(v) != 0 {
				t.Fatalf("pool holds %v", v)
			}
		})
	}
}

// A body shorter than its Content-Length, and a connection reset mid-body,
// are Transient, and the partial volume is removed.
func TestImageCutOffDownloadIsTransientAndLeavesNothing(t *testing.T) {
	const size = 512 << 10
	cut := func(reset bool, announce bool) func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
		return func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
			if announce {
				w.Header().Set("Content-Length", strconv.Itoa(size))
			}
			_, _ = w.Write(f.body[:size/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			if reset {
				_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
			}
			_ = conn.Close()
		}
	}
	for _, tc := range []struct {
		name    string
		handler func(f *imageFixture, w http.ResponseWriter, r *http.Request)
		want    string
	}{
		{"short body", cut(false, true), fmt.Sprintf("the server sent %d of the %d bytes it announced", size/2, size)},
		{"reset with a length", cut(true, true), "downloading"},
		{"reset without a length", cut(true, false), "downloading"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newImageFixture(t, size, tc.handler)
			_, err := f.ensure(withinTest(t), nil)
			if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want Transient saying %q", err, tc.want)
			}
			if v := f.volumes(); len(v) != 0 {
				t.Fatalf("pool holds %v", v)
			}
		})
	}
}

// An image volume without its marker (an upload cut off before) is
// replaced, and so is a marker left without its image.
func TestImageCutOffUploadIsReplaced(t *testing.T) {
	for _, leftover := range []string{"image", "marker"} {
		t.Run(leftover, func(t *testing.T) {
			f := newImageFixture(t, 200<<10, nil)
			name := map[string]string{"image": imageVolumeName(f.img), "marker": imageMarkerName(f.img)}[leftover]
			f.putVolume(name, []byte("the first 17 bytes"))
			vol, err := f.ensure(withinTest(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			f.mustBeCached(vol)
			if f.gets.Load() != 1 {
				t.Fatalf("%d GETs", f.gets.Load())
			}
		})
	}
}

// The upload runs on a dedicated connection, closed afterwards; every
// other call stays on the pooled one.
func TestImageUploadOnADedicatedConnection(t *testing.T) {
	f := newImageFixture(t, 100<<10, nil)
	if _, err := f.ensure(withinTest(t), nil); err != nil {
		t.Fatal(err)
	}
	log := f.h.callLog()
	var uploads, others []string
	for _, c := range log {
		if strings.HasSuffix(c, ":StorageVolUpload") {
			uploads = append(uploads, c)
		} else {
			others = append(others, c)
		}
	}
	if !slices.Equal(uploads, []string{"2:StorageVolUpload"}) {
		t.Fatalf("uploads %v, want one on connection 2 (1 is the pooled one)", uploads)
	}
	for _, c := range others {
		if !strings.HasPrefix(c, "1:") {
			t.Errorf("%s is not on the pooled connection", c)
		}
	}
	if dials, closes := f.h.counts(); dials != 2 || closes != 1 {
		t.Errorf("%d dials, %d closes; want 2 (pooled, upload) and 1 (the upload's)", dials, closes)
	}
}

// A ctx cancelled mid-download stops it (the server holds the rest of the
// body until the client goes, so returning at all proves the stop), is
// Transient, and leaves no marker and no partial image.
func TestImageDownloadCancelledStopsAndLeavesNoMarker(t *testing.T) {
	const size = 1 << 20
	f := newImageFixture(t, size, func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(f.body[:size/4])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	f.reachAt = size / 4
	ctx, cancel := context.WithCancel(withinTest(t))
	go func() {
		<-f.reached
		cancel()
	}()
	_, err := f.ensure(ctx, nil)
	if !errors.Is(err, provider.ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want Transient with context.Canceled", err)
	}
	if v := f.volumes(); len(v) != 0 {
		t.Fatalf("pool holds %v", v)
	}
}

// Concurrent ensureImage calls for one image on one host download it once:
// the first holds the download (the server holds its body) until each
// other caller has looked into the cache; then all get the same volume.
func TestConcurrentEnsureImageDownloadsOnce(t *testing.T) {
	const callers = 4
	release := make(chan struct{})
	f := newImageFixture(t, 100<<10, func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
		<-release
		http.ServeContent(w, r, "image.qcow2", time.Time{}, bytes.NewReader(f.body))
	})
	ctx := withinTest(t)
	vols := make([]libvirt.StorageVol, callers)
	errs := make([]error, callers)
	lookups := make([]atomic.Int32, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &countedLookups{backend: f.b, n: &lookups[i]}
			vols[i], errs[i] = f.p.ensureImage(ctx, f.p.hosts[0], b, f.pool, f.img, nil)
		}()
	}
	testenv.Eventually(t, "one caller at the server, every caller looked into the cache", func() bool {
		for i := range lookups {
			if lookups[i].Load() == 0 {
				return false
			}
		}
		return f.gets.Load() >= 1
	})
	close(release)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || vols[i] != vols[0] {
			t.Fatalf("caller %d: %+v, %v (caller 0: %+v)", i, vols[i], errs[i], vols[0])
		}
	}
	if n := f.gets.Load(); n != 1 {
		t.Fatalf("%d downloads, want 1", n)
	}
	f.mustBeCached(vols[0])
}

// countedLookups counts one caller's volume lookups.
type countedLookups struct {
	backend
	n *atomic.Int32
}

func (c *countedLookups) StorageVolLookupByName(ctx context.Context, pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	c.n.Add(1)
	return c.backend.StorageVolLookupByName(ctx, pool, name)
}

// A caller waiting for another's download stops waiting when its ctx ends.
func TestImageLockWaitEndsWithCtx(t *testing.T) {
	f := newImageFixture(t, 1000, nil)
	unlock, err := f.p.images.Lock(context.Background(), "h1/"+f.img.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := f.ensure(ctx, nil); done <- err }()
	testenv.Eventually(t, "the caller looked into the cache", func() bool {
		return countCalls(f.h.callLog(), "StorageVolLookupByName") >= 1
	})
	cancel()
	if err := <-done; !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "waiting for its download") {
		t.Fatalf("%v", err)
	}
	if f.gets.Load() != 0 {
		t.Fatal("a caller that gave up waiting downloaded")
	}
}

// Progress names the image (its key, or the URL's host and path without
// the query) and shows done/total, or done alone without a length; it is
// throttled: with a clock that does not move only the first and the final
// value are reported, with one that moves a second per look at most one
// per MiB.
func TestImageDownloadProgress(t *testing.T) {
	const size = 5<<20 + 1000
	chunked := func(f *imageFixture, w http.ResponseWriter, r *http.Request) {
		for off := 0; off < size; off += 32 << 10 {
			_, _ = w.Write(f.body[off:min(off+32<<10, size)])
			w.(http.Flusher).Flush()
		}
	}
	t.Run("still clock", func(t *testing.T) {
		f := newImageFixture(t, size, nil)
		f.p.now = func() time.Time { return time.Unix(1e9, 0) }
		var got []string
		if _, err := f.ensure(withinTest(t), func(s string) { got = append(got, s) }); err != nil {
			t.Fatal(err)
		}
		want := []string{"downloading image debian-12: waiting for the server",
			"downloading image debian-12: 0.0/5.0 MiB", "downloading image debian-12: 5.0/5.0 MiB"}
		if !slices.Equal(got, want) {
			t.Fatalf("progress %q, want %q", got, want)
		}
	})
	for _, tc := range []struct {
		name    string
		handler func(f *imageFixture, w http.ResponseWriter, r *http.Request)
		byURL   bool
		line    *regexp.Regexp
		final   string
	}{
		{"with length", nil, false, regexp.MustCompile(`^downloading image debian-12: (\d+\.\d)/5\.0 MiB$`), "downloading image debian-12: 5.0/5.0 MiB"},
		{"without length, by URL", chunked, true, regexp.MustCompile(`^downloading image 127\.0\.0\.1:\d+/images/debian-12\.qcow2: (\d+\.\d) MiB$`), " MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newImageFixture(t, size, tc.handler)
			if tc.byURL {
				f.img.Key = ""
			}
			var mu sync.Mutex
			clock := time.Unix(1e9, 0)
			f.p.now = func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				clock = clock.Add(time.Second)
				return clock
			}
			var got []string
			if _, err := f.ensure(withinTest(t), func(s string) { got = append(got, s) }); err != nil {
				t.Fatal(err)
			}
			// Before any byte: what the download waits for.
			if len(got) == 0 || !strings.HasSuffix(got[0], ": waiting for the server") {
				t.Fatalf("first progress %q, want the wait for the server", got)
			}
			got = got[1:]
			if len(got) < 3 || len(got) > 2+5 {
				t.Fatalf("%d progress lines, want the first, one per MiB at most, and the final: %q", len(got), got)
			}
			prev := -1.0
			for i, s := range got {
				m := tc.line.FindStringSubmatch(s)
				if m == nil {
					t.Fatalf("progress %q does not match %s", s, tc.line)
				}
				v, _ := strconv.ParseFloat(m[1], 64)
				if v < prev || (v == prev && i != len(got)-1) {
					t.Fatalf("progress %q: not increasing, or a MiB reported twice", got)
				}
				prev = v
				if strings.Contains(s, "s3cr3t") || strings.Contains(s, "token") {
					t.Fatalf("progress %q shows the query", s)
				}
			}
			if !strings.HasSuffix(got[len(got)-1], tc.final) || prev != 5.0 {
				t.Fatalf("final progress %q", got[len(got)-1])
			}
		})
	}
}

// The meter never shows one line twice, however the reads fall: reads
// landing at 4.96 MiB (MiB figure 4) and at 5.0 MiB (figure 5) both print
// "5.0", as CI saw when the upload read large chunks.
func TestProgressMeterLines(t *testing.T) {
	const total = 5<<20 + 1000
	for _, tc := range []struct {
		name  string
		reads []int64 // byte counts seen, a second apart; the last is forced
		want  []string
	}{
		{"one read per MiB", []int64{0, 1 << 20, 2 << 20, 3 << 20, 4 << 20, total},
			[]string{"0.0", "1.0", "2.0", "3.0", "4.0", "5.0"}},
		{"large reads straddling the rounding", []int64{0, 1150000, 2600000, 3900000, 5200000, 5243000, total},
			[]string{"0.0", "1.1", "2.5", "3.7", "5.0"}},
		{"within one MiB", []int64{0, 100, 200, total},
			[]string{"0.0", "5.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := time.Unix(1e9, 0)
			var got []string
			m := &progressMeter{name: "img", total: total, now: func() time.Time { clock = clock.Add(time.Second); return clock },
				emit: func(s string) {
					got = append(got, strings.TrimSuffix(strings.TrimPrefix(s, "downloading image img: "), "/5.0 MiB"))
				}}
			for i, n := range tc.reads {
				m.report(n, i == 0 || i == len(tc.reads)-1)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("lines %q, want %q", got, tc.want)
			}
		})
	}
}

// The download is a libvirt.download span under the operation's, with the
// URL's host, the configured digest and the byte count, and the upload's
// RPC span is its child.
func TestImageDownloadSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	f := newImageFixture(t, 100<<10, nil)
	f.p.tracerProvider = tp
	f.p.table = newHostTable(func(ctx context.Context, hc Host) (backend, error) {
		b, err := f.h.connect(ctx, hc)
		if err != nil {
			return nil, err
		}
		return f.p.observe(hc.Name, b), nil
	})
	b, err := f.p.table.get(context.Background(), f.p.hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, op := tp.Tracer("test").Start(withinTest(t), "provider.create")
	if _, err := f.p.ensureImage(ctx, f.p.hosts[0], b, f.pool, f.img, nil); err != nil {
		t.Fatal(err)
	}
	op.End()
	var download sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "libvirt.download" {
			download = s
		}
	}
	if download == nil || download.Parent().SpanID() != op.SpanContext().SpanID() {
		t.Fatalf("no libvirt.download span under the operation's")
	}
	attrs := map[string]string{}
	for _, a := range download.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	host := strings.TrimPrefix(f.srv.URL, "http://")
	if attrs["libvirt.url_host"] != host || attrs["libvirt.sha256_configured"] != f.img.SHA256 ||
		attrs["libvirt.bytes"] != strconv.Itoa(100<<10) || attrs["libvirt.host"] != "h1" {
		t.Fatalf("attributes %v", attrs)
	}
	var uploadUnder bool
	for _, s := range sr.Ended() {
		if s.Name() == "libvirt.StorageVolUpload" && s.Parent().SpanID() == download.SpanContext().SpanID() {
			uploadUnder = true
		}
	}
	if !uploadUnder {
		t.Fatal("the upload's span is not a child of libvirt.download")
	}
}

// The log lines name host and image, show the URL without its query, and
// never the body.
func TestImageDownloadLogsNoQueryAndNoBody(t *testing.T) {
	const sentinel = "IMAGE-BODY-SENTINEL"
	f := newImageFixture(t, 64<<10, nil)
	copy(f.body[1000:], sentinel)
	sum := sha256.Sum256(f.body)
	f.img.SHA256 = hex.EncodeToString(sum[:])
	var logs lineLog
	ctx := logr.NewContext(withinTest(t), logs.logger(2))
	if _, err := f.ensure(ctx, nil); err != nil {
		t.Fatal(err)
	}
	f.img.SHA256 = strings.Repeat("1", 64) // another digest, a mismatch: the failure's line too
	if _, err := f.ensure(ctx, nil); !errors.Is(err, provider.ErrPermanent) {
		t.Fatalf("%v, want the mismatch", err)
	}
	started := logs.matching(`"msg"="image download started" "host"="h1" "image"="debian-12"`)
	done := logs.matching(`"msg"="image downloaded and verified" "host"="h1" "image"="debian-12"`)
	failed := logs.matching(`"msg"="image download failed" "host"="h1" "image"="debian-12"`)
	if len(started) != 2 || len(done) != 1 || len(failed) != 1 {
		t.Fatalf("lines: %d started, %d done, %d failed: %q", len(started), len(done), len(failed), logs.matching("image"))
	}
	if !strings.Contains(started[0], `"url"="`+f.srv.URL+`/images/debian-12.qcow2"`) {
		t.Errorf("start line %q lacks the URL", started[0])
	}
	for _, line := range logs.matching("") {
		if strings.Contains(line, "s3cr3t") || strings.Contains(line, sentinel) {
			t.Fatalf("line shows the query or the body: %s", line)
		}
	}
}

// The pool's own failures keep their class (a full pool is
// QuotaExceeded), except NotFound: a volume that vanished under the
// download is Transient, since Create never answers NotFound. Either way
// nothing is left.
func TestImagePoolFailuresKeepTheirClassButNeverNotFound(t *testing.T) {
	for _, tc := range []struct {
		rpc   string
		err   error
		class error
	}{
		{"StorageVolCreateXML", lvErr(libvirt.ErrSystemError, "cannot allocate 1 bytes in file 'x': No space left on device"), provider.ErrQuotaExceeded},
		{"StorageVolUpload", lvErr(libvirt.ErrSystemError, "cannot write: No space left on device"), provider.ErrQuotaExceeded},
		{"StorageVolUpload", lvErr(libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name"), provider.ErrTransient},
		{"StoragePoolRefresh", lvErr(libvirt.ErrInternalError, "internal error: pool busy"), provider.ErrTransient},
	} {
		t.Run(tc.rpc+"/"+provider.ClassName(&provider.Error{Class: tc.class}), func(t *testing.T) {
			f := newImageFixture(t, 10<<10, nil)
			f.h.failNext(tc.rpc, tc.err)
			_, err := f.ensure(withinTest(t), nil)
			if provider.ClassOf(err) != tc.class || !strings.Contains(err.Error(), "image debian-12 on host h1") {
				t.Fatalf("%v: class %s, want %v, naming the image and host", err, provider.ClassName(err), tc.class)
			}
			if v := f.volumes(); len(v) != 0 {
				t.Fatalf("pool holds %v", v)
			}
		})
	}
}

// A server whose certificate the operator does not trust stays so:
// Permanent.
func TestImageUntrustedCertificateIsPermanent(t *testing.T) {
	f := newImageFixture(t, 1000, nil)
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	f.p.http = newImageClient() // trusts the system's roots, not the test server's
	f.img.URL = tlsSrv.URL + "/debian-12.qcow2?token=s3cr3t"
	_, err := f.ensure(withinTest(t), nil)
	if !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("%v, want Permanent about the certificate, without the query", err)
	}
}

// imageDownloadSize: the HEAD's Content-Length, -1 without one or when the
// server refuses HEAD, Permanent for 404 and 410, Transient when the
// server cannot be reached.
func TestImageDownloadSize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		size    int64
		class   error
	}{
		{"length", func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Content-Length", "154140672") }, 154140672, nil},
		{"no length", func(w http.ResponseWriter, r *http.Request) { w.(http.Flusher).Flush() }, -1, nil},
		{"HEAD refused", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusMethodNotAllowed) }, -1, nil},
		{"HEAD forbidden (signed for GET)", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }, -1, nil},
		{"server error", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }, -1, nil},
		{"404", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) }, -1, provider.ErrPermanent},
		{"410", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }, -1, provider.ErrPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var method string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				method = r.Method
				tc.handler(w, r)
			}))
			defer srv.Close()
			p := newFakeProvider(t, newFakeHost("h1"))
			p.http = srv.Client()
			img := imageRef{Key: "debian-12", URL: srv.URL + "/debian-12.qcow2?token=s3cr3t", SHA256: strings.Repeat("a", 64), Format: "qcow2"}
			size, err := p.imageDownloadSize(context.Background(), img)
			if method != http.MethodHead {
				t.Errorf("method %s", method)
			}
			if size != tc.size || (tc.class == nil) != (err == nil) || (tc.class != nil && !errors.Is(err, tc.class)) {
				t.Fatalf("size %d, err %v; want %d, class %v", size, err, tc.size, tc.class)
			}
			if err != nil && (!strings.Contains(err.Error(), "404 Not Found") && !strings.Contains(err.Error(), "410 Gone") ||
				strings.Contains(err.Error(), "s3cr3t")) {
				t.Errorf("%q: no status line, or the query", err)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close() // nothing listens there now
		p := newFakeProvider(t, newFakeHost("h1"))
		_, err := p.imageDownloadSize(context.Background(), imageRef{Key: "k", URL: url + "/x?token=s3cr3t"})
		if !errors.Is(err, provider.ErrTransient) || strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("%v, want Transient without the query", err)
		}
	})
}

// redactURL drops userinfo, query and fragment.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://cdn.example/img/debian.qcow2?X-Amz-Signature=abc&X-Amz-Credential=def": "https://cdn.example/img/debian.qcow2",
		"https://user:pass@cdn.example/a.qcow2#frag":                                    "https://cdn.example/a.qcow2",
		"http://127.0.0.1:8080/a.raw":                                                   "http://127.0.0.1:8080/a.raw",
		"https://cdn.example/a.qcow2?":                                                  "https://cdn.example/a.qcow2",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// libvirtd refuses a pool refresh while another volume is being built
// ("asynchronous jobs running", seen on the real host when an overlay was
// created during a first download): the verified download still counts.
// Any other refresh failure fails it.
func TestImageRefreshRefusedByABusyPoolIsNotAFailure(t *testing.T) {
	f := newImageFixture(t, 64<<10, nil)
	f.h.failNext("StoragePoolRefresh", lvErr(libvirt.ErrInternalError, "internal error: pool 'default' has asynchronous jobs running."))
	if _, err := f.ensure(withinTest(t), nil); err != nil {
		t.Fatalf("a busy pool's refusal to refresh failed the download: %v", err)
	}
	g := newImageFixture(t, 64<<10, nil)
	g.h.failNext("StoragePoolRefresh", lvErr(libvirt.ErrInternalError, "internal error: something else"))
	if _, err := g.ensure(withinTest(t), nil); err == nil {
		t.Fatal("another refresh failure did not fail the download")
	}
}
