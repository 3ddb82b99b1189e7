package nocloud

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

const sectorSize = 2048

// imageOptions are the knobs of buildImage; Build always uses seedImage.
// The others exist so that tests can prove the real readers catch an image
// without an extension, with another label or without normalization.
type imageOptions struct {
	label             string
	joliet, rockRidge bool
	normalize         bool
}

var seedImage = imageOptions{label: VolumeLabel, joliet: true, rockRidge: true, normalize: true}

// Build returns the seed's ISO9660 image: label cidata, Rock Ridge and
// Joliet, the files of s.Files() at its root, every date SeedTime, every
// file root-owned and read-only (0400, the root directory 0500). The same
// Seed gives the same bytes; the size is a whole number of 2 KiB sectors.
//
// Errors: an invalid meta-data value is ErrPermanent; a failure of the
// scratch directory or of the writer is ErrTransient. No error carries file
// content.
func Build(s Seed) ([]byte, error) {
	files, err := s.Files()
	if err != nil {
		return nil, err
	}
	return buildImage(files, seedImage)
}

func buildImage(files []File, o imageOptions) (_ []byte, err error) {
	workspace, err := os.MkdirTemp("", "nocloud-seed-")
	if err != nil {
		return nil, provider.Errorf(provider.ErrTransient, "nocloud: scratch directory for the seed (TMPDIR must be writable): %w", err)
	}
	// Finalize removes the workspace on success only.
	defer func() {
		if rerr := os.RemoveAll(workspace); rerr != nil && err == nil {
			err = provider.Errorf(provider.ErrTransient, "nocloud: remove the seed's scratch directory: %w", rerr)
		}
	}()

	img := &memoryImage{}
	fsys, err := iso9660.Create(img, 0, 0, sectorSize, workspace)
	if err != nil {
		return nil, provider.Errorf(provider.ErrTransient, "nocloud: create the ISO9660 writer: %w", err)
	}
	for _, f := range files {
		if err := writeFile(fsys, f); err != nil {
			return nil, err
		}
	}
	if err := fsys.Finalize(iso9660.FinalizeOptions{
		RockRidge:        o.rockRidge,
		Joliet:           o.joliet,
		VolumeIdentifier: o.label,
	}); err != nil {
		return nil, provider.Errorf(provider.ErrTransient, "nocloud: write the ISO9660 image: %w", err)
	}
	out := img.buf
	if o.normalize {
		if out, err = normalize(out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReadFile returns the file named name at the root of a seed image, and
// whether it is there: the seed as the guest's cloud-init reads it (the
// Rock Ridge names), for the providers' test doubles that play the guest.
// An image that is not ISO9660 is an error.
func ReadFile(img []byte, name string) (provider.Sensitive, bool, error) {
	fsys, err := iso9660.Read(&memoryImage{buf: img}, int64(len(img)), 0, sectorSize)
	if err != nil {
		return "", false, fmt.Errorf("nocloud: read the seed image: %w", err)
	}
	entries, err := fsys.ReadDir(".")
	if err != nil {
		return "", false, fmt.Errorf("nocloud: read the seed's root directory: %w", err)
	}
	for _, e := range entries {
		if e.Name() != name {
			continue
		}
		b, err := fsys.ReadFile(name)
		if err != nil {
			return "", false, fmt.Errorf("nocloud: read %s from the seed: %w", name, err)
		}
		return provider.Sensitive(b), true, nil
	}
	return "", false, nil
}

// writeFile copies one file into the writer's workspace. The library's
// errors name the path, never the content.
func writeFile(fsys *iso9660.FileSystem, f File) error {
	w, err := fsys.OpenFile("/"+f.Name, os.O_CREATE|os.O_RDWR|os.O_TRUNC)
	if err != nil {
		return provider.Errorf(provider.ErrTransient, "nocloud: create %s in the seed: %w", f.Name, err)
	}
	if _, err := io.WriteString(w, f.Content.Reveal()); err != nil {
		_ = w.Close()
		return provider.Errorf(provider.ErrTransient, "nocloud: write %s in the seed: %w", f.Name, err)
	}
	if err := w.Close(); err != nil {
		return provider.Errorf(provider.ErrTransient, "nocloud: write %s in the seed: %w", f.Name, err)
	}
	return nil
}

// memoryImage is the backend.Storage go-diskfs writes the image into: a
// byte slice that grows with each WriteAt, so no image file is needed.
//
// A write of zeros never clears bytes already written. go-diskfs v1.9.4
// pads every file with blocksize-(size%blocksize) zeros, a whole sector
// when the size is a multiple of 2 KiB (0 included), and writes file data
// after the Joliet directories: the last file's padding would wipe the
// Joliet root directory. The buffer starts zeroed and the writer puts each
// extent once, so skipping such writes loses nothing else.
type memoryImage struct {
	buf []byte
	off int64
}

var _ backend.Storage = (*memoryImage)(nil)

func (m *memoryImage) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("nocloud: negative offset")
	}
	if end := off + int64(len(p)); end > int64(len(m.buf)) {
		m.buf = append(m.buf, make([]byte, end-int64(len(m.buf)))...)
	}
	if allZero(p) {
		return len(p), nil
	}
	return copy(m.buf[off:], p), nil
}

func allZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

func (m *memoryImage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("nocloud: negative offset")
	}
	if off >= int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memoryImage) Read(p []byte) (int, error) {
	n, err := m.ReadAt(p, m.off)
	m.off += int64(n)
	return n, err
}

func (m *memoryImage) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += m.off
	case io.SeekEnd:
		offset += int64(len(m.buf))
	default:
		return 0, errors.New("nocloud: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("nocloud: negative position")
	}
	m.off = offset
	return offset, nil
}

func (m *memoryImage) Stat() (fs.FileInfo, error) {
	return memoryImageInfo{size: int64(len(m.buf))}, nil
}
func (m *memoryImage) Close() error                            { return nil }
func (m *memoryImage) Sys() (*os.File, error)                  { return nil, backend.ErrNotSuitable }
func (m *memoryImage) Writable() (backend.WritableFile, error) { return m, nil }
func (m *memoryImage) Path() string                            { return "" }

type memoryImageInfo struct{ size int64 }

func (i memoryImageInfo) Name() string       { return "seed.iso" }
func (i memoryImageInfo) Size() int64        { return i.size }
func (i memoryImageInfo) Mode() fs.FileMode  { return 0o400 }
func (i memoryImageInfo) ModTime() time.Time { return SeedTime }
func (i memoryImageInfo) IsDir() bool        { return false }
func (i memoryImageInfo) Sys() any           { return nil }
