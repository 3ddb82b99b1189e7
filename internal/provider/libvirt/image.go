package libvirt

import (
	"context"
	"net/http"
	"time"

	"github.com/digitalocean/go-libvirt"

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

// imageVolumeName and imageMarkerName are the cache's volume names: the
// digest names the content, so two catalogue keys for the same image share
// one volume, and a changed image never reuses a stale one.
func imageVolumeName(img imageRef) string { panic("helper B") }
func imageMarkerName(img imageRef) string { panic("helper B") }

// cachedImage is the image's volume in pool when it is cached and
// complete (its marker exists); found is false otherwise.
func (p *Provider) cachedImage(ctx context.Context, b backend, pool libvirt.StoragePool, img imageRef) (vol libvirt.StorageVol, found bool, err error) {
	panic("helper B")
}

// imageDownloadSize is the image's size as the server announces it (a HEAD
// request's Content-Length), for the capacity precheck; -1 when the server
// gives none (the download then streams without a length).
func (p *Provider) imageDownloadSize(ctx context.Context, img imageRef) (int64, error) {
	panic("helper B")
}

// ensureImage makes the image cached and complete in h's pool and returns
// its volume as the pooled connection b sees it. One download per host and
// image at a time (p.images): a second caller waits for the first and then
// finds it cached. progress receives "downloading image <name>: 12/147 MiB"
// (or "12 MiB" without a length) as the bytes stream.
func (p *Provider) ensureImage(ctx context.Context, h Host, b backend, pool libvirt.StoragePool, img imageRef, progress func(string)) (libvirt.StorageVol, error) {
	panic("helper B")
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
