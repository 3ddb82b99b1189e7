package libvirt

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// The image cache: each image is downloaded once per host, through the
// operator, verified by its sha256 while it streams into the host's pool on
// a dedicated connection (the pooled one stays free for the other calls),
// and then marked complete by a small marker volume written last. An image
// volume without its marker is a cut-off upload and is replaced.

// imageRef is an image as Create resolved it (a catalogue entry, or a URL
// with its sha256 given in placement.image).
type imageRef struct {
	// Key is the catalogue key, or "" for an image given by URL; messages
	// and progress name Key, else the URL's host and path.
	Key      string
	URL      string
	SHA256   string
	Format   string // qcow2 or raw
	Firmware string // bios or uefi
	Family   squid.Family
}

// The cache's volume names: "egress-proxy-image_<sha256>.<format>" and
// "egress-proxy-image_<sha256>.complete". They have one '_', so
// parseVolumeName (four parts) never takes them for an instance's.
const (
	imageVolumePrefix = "egress-proxy-image" + volumeSep
	imageMarkerSuffix = ".complete"
)

const (
	// imagePlaceholderBytes is the capacity an image volume is created
	// with when the server announces no length: the upload writes the
	// file from its start, and StoragePoolRefresh reads the real size and
	// format back from what was written.
	imagePlaceholderBytes = 1 << 20
	// markerBytes is the marker's capacity: its existence is the mark.
	markerBytes = 0
	// cleanupTimeout bounds the removal of a failed download's volume,
	// which runs even when the caller's ctx has ended.
	cleanupTimeout = 30 * time.Second
	// progressEvery is the least time between two progress reports (and
	// a report needs a new MiB besides), so a fast download does not
	// flood the status.
	progressEvery = time.Second
)

// Span attributes of libvirt.download.
const (
	attrURLHost          = attribute.Key("libvirt.url_host")
	attrSHA256Configured = attribute.Key("libvirt.sha256_configured")
	attrSHA256Actual     = attribute.Key("libvirt.sha256_actual")
)

// imageDigest is the image's sha256 as it names volumes and locks.
func imageDigest(img imageRef) string { return strings.ToLower(img.SHA256) }

// imageVolumeName and imageMarkerName are the cache's volume names: the
// digest names the content, so two catalogue keys for the same image share
// one volume, and a changed image never reuses a stale one.
func imageVolumeName(img imageRef) string {
	format := img.Format
	if format == "" {
		format = DefaultImageFormat
	}
	return imageVolumePrefix + imageDigest(img) + "." + format
}

func imageMarkerName(img imageRef) string {
	return imageVolumePrefix + imageDigest(img) + imageMarkerSuffix
}

// redactURL is the URL as logs and messages show it: without userinfo,
// query and fragment.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// cachedImage is the image's volume in pool when it is cached and
// complete (its marker exists); found is false otherwise.
func (p *Provider) cachedImage(ctx context.Context, b backend, pool libvirt.StoragePool, img imageRef) (vol libvirt.StorageVol, found bool, err error) {
	if _, err := b.StorageVolLookupByName(ctx, pool, imageMarkerName(img)); err != nil {
		if errors.Is(err, provider.ErrNotFound) {
			return libvirt.StorageVol{}, false, nil
		}
		return libvirt.StorageVol{}, false, err
	}
	vol, err = b.StorageVolLookupByName(ctx, pool, imageVolumeName(img))
	if err != nil {
		if errors.Is(err, provider.ErrNotFound) { // a marker left behind: not cached
			return libvirt.StorageVol{}, false, nil
		}
		return libvirt.StorageVol{}, false, err
	}
	return vol, true, nil
}

// imageDownloadSize is the image's size as the server announces it (a HEAD
// request's Content-Length), for the capacity precheck; -1 when the server
// gives none (the download then streams without a length).
//
// Some servers refuse HEAD (405, or a 403 from a URL signed for GET only),
// so an answer that is not 2xx means "unknown", except 404 and 410: the
// image is not there, and the GET would say so too.
func (p *Provider) imageDownloadSize(ctx context.Context, img imageRef) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, img.URL, nil)
	if err != nil {
		return -1, provider.Errorf(provider.ErrPermanent, "image %s: URL %s: %v", img.display(), redactURL(img.URL), err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return -1, httpFailure(ctx, err, "image %s: HEAD %s", img.display(), redactURL(img.URL))
	}
	_ = resp.Body.Close()
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound || code == http.StatusGone:
		return -1, provider.Errorf(provider.ErrPermanent, "image %s: HEAD %s: %s", img.display(), redactURL(img.URL), resp.Status)
	case code >= 200 && code < 300 && resp.ContentLength > 0:
		return resp.ContentLength, nil
	default:
		logr.FromContextOrDiscard(ctx).V(1).Info("image size unknown: the server announced none",
			"image", img.display(), "url", redactURL(img.URL), "status", resp.Status)
		return -1, nil
	}
}

// ensureImage makes the image cached and complete in h's pool and returns
// its volume as the pooled connection b sees it. One download per host and
// image at a time (p.images): a second caller waits for the first and then
// finds it cached. progress receives "downloading image <name>: 12/147 MiB"
// (or "12 MiB" without a length) as the bytes stream.
//
// Every error is classified, and none is NotFound (Create never answers
// NotFound: a volume that vanishes under it is Transient). A failed
// download leaves no volume behind (best effort: one left over has no
// marker, so the next call replaces it).
func (p *Provider) ensureImage(ctx context.Context, h Host, b backend, pool libvirt.StoragePool, img imageRef, progress func(string)) (libvirt.StorageVol, error) {
	if progress == nil {
		progress = func(string) {}
	}
	vol, found, err := p.cachedImage(ctx, b, pool, img)
	if err != nil || found {
		return vol, imageError(err, "image %s on host %s: looking up the cache", img.display(), h.Name)
	}
	// Said before the waits (another Create's download, the server's
	// answer), so the Proxy shows what it waits for from the start.
	progress("downloading image " + img.display() + ": waiting for the server")
	unlock, err := p.images.Lock(ctx, h.Name+"/"+imageDigest(img))
	if err != nil {
		return libvirt.StorageVol{}, provider.Errorf(provider.ErrTransient,
			"image %s on host %s: waiting for its download by another Create: %w", img.display(), h.Name, err)
	}
	defer unlock()
	// A caller that held the lock before us may have finished it.
	vol, found, err = p.cachedImage(ctx, b, pool, img)
	if err != nil || found {
		return vol, imageError(err, "image %s on host %s: looking up the cache", img.display(), h.Name)
	}
	if err := p.clearImage(ctx, h, b, pool, img); err != nil {
		return libvirt.StorageVol{}, imageError(err, "image %s on host %s: removing a cut-off download", img.display(), h.Name)
	}
	if err := p.downloadImage(ctx, h, b, pool, img, progress); err != nil {
		return libvirt.StorageVol{}, err
	}
	x, err := volumeXML(volumeSpec{Name: imageMarkerName(img), CapacityBytes: markerBytes, Format: "raw"})
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	if _, err := b.StorageVolCreateXML(ctx, pool, x); err != nil && !hasCode(err, libvirt.ErrStorageVolExist) {
		// The image stays, unmarked: the next call downloads it again.
		return libvirt.StorageVol{}, imageError(err, "image %s on host %s: writing the completion marker %s", img.display(), h.Name, imageMarkerName(img))
	}
	vol, err = b.StorageVolLookupByName(ctx, pool, imageVolumeName(img))
	if err != nil {
		return libvirt.StorageVol{}, imageError(err, "image %s on host %s: the downloaded volume %s", img.display(), h.Name, imageVolumeName(img))
	}
	return vol, nil
}

// clearImage removes what a cut-off download left: the marker first (an
// image without marker is never trusted, a marker without image is a
// leftover too), then the image.
func (p *Provider) clearImage(ctx context.Context, h Host, b backend, pool libvirt.StoragePool, img imageRef) error {
	for _, name := range []string{imageMarkerName(img), imageVolumeName(img)} {
		vol, err := b.StorageVolLookupByName(ctx, pool, name)
		if errors.Is(err, provider.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("removing an incomplete image download", "host", h.Name, "image", img.display(), "volume", name)
		if err := b.StorageVolDelete(ctx, vol); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
	}
	return nil
}

// downloadImage streams the image from its URL into a new image volume in
// pool, through a sha256 hasher, on a dedicated connection to h, and
// refreshes the pool so libvirt reads the size and format of what was
// written. On any failure the volume is removed again.
func (p *Provider) downloadImage(ctx context.Context, h Host, b backend, pool libvirt.StoragePool, img imageRef, progress func(string)) (err error) {
	name, where := img.display(), redactURL(img.URL)
	volName := imageVolumeName(img)
	fail := func(class error, format string, args ...any) error {
		return provider.Errorf(class, "image %s on host %s: "+format, append([]any{name, h.Name}, args...)...)
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("host", h.Name, "image", name)
	start := time.Now()
	var sent int64
	var u *url.URL
	if u, err = url.Parse(img.URL); err != nil {
		return fail(provider.ErrPermanent, "URL %s: %v", where, err)
	}
	ctx, span := startSpan(ctx, p.tracer(), "libvirt.download", attrHost.String(h.Name), attrURLHost.String(u.Host),
		attrSHA256Configured.String(imageDigest(img)), attrPool.String(pool.Name), attrVolume.String(volName))
	defer func() {
		setSpan(span, attrBytes.Int64(sent))
		endSpan(span, err)
		kv := []any{"url", where, "bytes", sent, "duration", time.Since(start).Round(time.Millisecond)}
		if err != nil {
			log.V(1).Info("image download failed", append(kv, "class", provider.ClassName(err), "error", err.Error())...)
		} else {
			log.V(1).Info("image downloaded and verified", append(kv, "sha256", imageDigest(img), "volume", volName)...)
		}
	}()

	// The request ends with this call: a body still being read by an
	// abandoned upload stops.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, img.URL, nil)
	if err != nil {
		return fail(provider.ErrPermanent, "URL %s: %v", where, err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return httpFailure(ctx, err, "image %s on host %s: GET %s", name, h.Name, where)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fail(statusClass(resp.StatusCode), "GET %s: %s", where, resp.Status)
	}
	length := resp.ContentLength // -1 when the server announces none
	log.V(1).Info("image download started", "url", where, "bytes", length, "pool", pool.Name, "volume", volName)

	up, err := p.table.fresh(ctx, h)
	if err != nil {
		return imageError(err, "image %s on host %s: connecting for the upload", name, h.Name)
	}
	closeUp := sync.OnceFunc(func() { _ = up.Close() })
	defer closeUp()

	capacity := uint64(imagePlaceholderBytes)
	if length > 0 {
		capacity = uint64(length)
	}
	x, err := volumeXML(volumeSpec{Name: volName, CapacityBytes: capacity, Format: img.Format})
	if err != nil {
		return err
	}
	vol, err := b.StorageVolCreateXML(ctx, pool, x)
	if err != nil {
		return imageError(err, "image %s on host %s: creating the volume %s", name, h.Name, volName)
	}
	// From here on a failure removes the volume: the dedicated connection
	// is closed first (which ends an upload still streaming on it), then
	// the volume goes on the pooled one, even when ctx has ended.
	defer func() {
		if err == nil {
			return
		}
		closeUp()
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer ccancel()
		if derr := b.StorageVolDelete(cctx, vol); derr != nil && !errors.Is(derr, provider.ErrNotFound) {
			err = &provider.Error{Class: provider.ClassOf(err), Err: fmt.Errorf("%w; the partial volume %s was not removed (the next download replaces it): %v", err, volName, derr)}
		}
	}()

	meter := &progressMeter{name: name, total: length, now: p.now, emit: progress}
	src := &imageStream{r: resp.Body, hash: sha256.New(), length: length, meter: meter}
	defer src.stop()
	meter.report(0, true)
	var uploadLength uint64 // 0: to the end of the stream
	if length > 0 {
		uploadLength = uint64(length)
	}
	upErr := up.StorageVolUpload(ctx, vol, src, uploadLength)
	n, srcErr, eof := src.result()
	sent = n
	switch {
	case ctx.Err() != nil:
		return fail(provider.ErrTransient, "downloading %s: stopped after %s: %w", where, mib(n)+" MiB", ctx.Err())
	case srcErr != nil:
		// The source failed (a short body, a reset): the upload's error
		// only echoes it.
		return httpFailure(ctx, srcErr, "image %s on host %s: downloading %s after %s MiB", name, h.Name, where, mib(n))
	case upErr != nil:
		return imageError(upErr, "image %s on host %s: uploading into %s after %s MiB", name, h.Name, volName, mib(n))
	case !eof:
		return fail(provider.ErrTransient, "uploading into %s: the upload ended after %s MiB, before the download did", volName, mib(n))
	}
	meter.report(n, true)
	if got := hex.EncodeToString(src.hash.Sum(nil)); got != imageDigest(img) {
		setSpan(span, attrSHA256Actual.String(got))
		return fail(provider.ErrPermanent, "sha256 mismatch: configured %s, downloaded %s (%d bytes from %s); the volume was removed",
			imageDigest(img), got, n, where)
	}
	closeUp()
	if err := b.StoragePoolRefresh(ctx, pool); err != nil {
		// The refresh only brings libvirt's figures for the volume up to
		// date (the digest proved the bytes); libvirtd refuses it while any
		// volume of the pool is being built (another instance's overlay,
		// seen on the real host), which must not fail a good download.
		if !refreshBusy(err) {
			return imageError(err, "image %s on host %s: refreshing pool %s after the upload", name, h.Name, pool.Name)
		}
		log.V(1).Info("pool refresh after the upload skipped: the pool is busy", "pool", pool.Name, "error", err.Error())
	}
	return nil
}

// refreshBusy is libvirtd's refusal to refresh a pool with a volume being
// built: "pool '...' has asynchronous jobs running." (ErrInternalError).
func refreshBusy(err error) bool {
	return hasCode(err, libvirt.ErrInternalError) && strings.Contains(err.Error(), "asynchronous jobs running")
}

// setSpan sets attributes on span, which may be nil.
func setSpan(span trace.Span, kv ...attribute.KeyValue) {
	if span != nil {
		span.SetAttributes(kv...)
	}
}

// imageError adds context to a classified error and keeps its class, but a
// NotFound becomes Transient: inside Create, a volume that vanished is
// something a retry redoes, not an answer about the instance. nil stays
// nil.
func imageError(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	class := provider.ClassOf(err)
	if class == provider.ErrNotFound {
		class = provider.ErrTransient
	}
	inner := err
	var pe *provider.Error
	if errors.As(err, &pe) {
		inner = pe.Err
	}
	return &provider.Error{Class: class, Err: fmt.Errorf(format+": %w", append(args, inner)...)}
}

// statusClass is the class of a download's HTTP status other than 200:
// the server refused this request (4xx) and will again, unless it says to
// come back (408, 429) or fails itself (5xx, and anything unexpected).
func statusClass(code int) error {
	if code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests {
		return provider.ErrPermanent
	}
	return provider.ErrTransient
}

// httpFailure classifies a request or body error: a certificate the
// operator does not trust stays so (Permanent); everything else (refused,
// reset, a short body, a timeout, ctx) is Transient. net/http's url.Error
// quotes the URL with its query, so only its cause is kept.
func httpFailure(ctx context.Context, err error, format string, args ...any) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	class := provider.ErrTransient
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	if errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie) {
		class = provider.ErrPermanent
	}
	return provider.Errorf(class, format+": %w", append(args, err)...)
}

// imageStream is the download as the upload reads it: every byte goes
// through the hasher and the progress meter. It checks the length the
// server announced (net/http already fails a short body, this says so in
// our words) and keeps the source's first error, so the caller can tell a
// failed download from a failed upload. The upload reads it on its own
// goroutine, hence the lock.
type imageStream struct {
	r      io.Reader
	hash   hash.Hash
	length int64
	meter  *progressMeter

	mu      sync.Mutex
	n       int64
	err     error
	eof     bool
	stopped bool
}

func (s *imageStream) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped { // the caller gave up: nothing more reaches the hasher or progress
		return 0, errors.New("the download was abandoned")
	}
	if n > 0 {
		s.hash.Write(b[:n])
		s.n += int64(n)
		s.meter.report(s.n, false)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) && s.length >= 0 {
		err = fmt.Errorf("the server sent %d of the %d bytes it announced: %w", s.n, s.length, err)
	}
	switch {
	case err == io.EOF && s.length >= 0 && s.n != s.length:
		err = fmt.Errorf("the server sent %d of the %d bytes it announced", s.n, s.length)
	case err == io.EOF:
		s.eof = true
	}
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// result is how many bytes passed, the source's error, and whether the
// source ended cleanly.
func (s *imageStream) result() (int64, error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.err, s.eof
}

// stop ends the stream for an upload goroutine that outlives the call.
func (s *imageStream) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
}

// progressMeter turns byte counts into progress lines: the first and the
// last always, in between at most one per progressEvery and only when the
// MiB figure changed; never the same line twice (4.96 MiB and 5.0 MiB are
// two MiB figures but one "5.0" on the line).
type progressMeter struct {
	name  string
	total int64 // -1 when unknown
	now   func() time.Time
	emit  func(string)

	last     time.Time
	lastMiB  int64
	lastLine string
	started  bool
}

func (m *progressMeter) report(n int64, force bool) {
	t := m.now()
	if !force && m.started && (n>>20 == m.lastMiB || t.Sub(m.last) < progressEvery) {
		return
	}
	line := fmt.Sprintf("downloading image %s: %s MiB", m.name, mib(n))
	if m.total > 0 {
		line = fmt.Sprintf("downloading image %s: %s/%s MiB", m.name, mib(n), mib(m.total))
	}
	m.started, m.last, m.lastMiB = true, t, n>>20
	if line == m.lastLine {
		return
	}
	m.lastLine = line
	m.emit(line)
}

// mib formats a byte count in MiB: whole ones from 10 MiB, else with one
// decimal, so a small image does not read "0/0 MiB".
func mib(n int64) string {
	if n >= 10<<20 {
		return strconv.FormatInt(n>>20, 10)
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64)
}

// newImageClient is the downloads' HTTP client: no overall timeout (an
// image takes minutes), but bounded connect, TLS and header waits, so a
// dead server fails the step instead of holding it; proxies from the
// environment, as the operator's other clients.
func newImageClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = time.Minute
	return &http.Client{Transport: t}
}
