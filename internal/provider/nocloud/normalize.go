package nocloud

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// SeedTime is the one date every seed image carries: volume creation and
// modification, every directory record and every Rock Ridge timestamp (the
// Unix epoch, as SOURCE_DATE_EPOCH=0 would give).
var SeedTime = time.Unix(0, 0).UTC()

// The modes of the seed's files under Rock Ridge: read-only and root's
// (cloud-init reads the seed as root; nobody else needs to).
const (
	seedFileMode = 0o400
	seedDirMode  = 0o500
)

// ECMA-119 layout used below.
const (
	firstVolumeDescriptor = 16
	vdPrimary             = 1
	vdSupplementary       = 2
	vdTerminator          = 255
	maxContinuations      = 8
)

// normalize rewrites the fields of a go-diskfs image that depend on when,
// where and by whom it was built, so that the same files give the same
// bytes:
//   - the volume descriptors' dates (go-diskfs writes time.Now() into all
//     four, expiration included): creation and modification become
//     SeedTime, expiration and effective "not specified";
//   - every directory record's date (the workspace file's mtime, in the
//     local time zone) becomes SeedTime in UTC;
//   - every Rock Ridge TF timestamp (mtime, atime, and ctime, which no
//     caller can set) becomes SeedTime;
//   - every Rock Ridge PX entry gets uid and gid 0 and the seed's modes
//     instead of the workspace's owner and umask, and the big-endian half
//     of its serial number, which go-diskfs v1.9.4 leaves zero.
//
// The seed is flat (files at the root only); anything else in the image is
// an error rather than a silently unnormalized field.
func normalize(img []byte) ([]byte, error) {
	var volumeBlocks uint32
	for i := firstVolumeDescriptor; ; i++ {
		vd, ok := sectorAt(img, uint32(i))
		if !ok {
			return nil, normalizeErr("no volume descriptor set terminator")
		}
		if string(vd[1:6]) != "CD001" {
			return nil, normalizeErr("sector %d is not a volume descriptor", i)
		}
		if vd[0] == vdTerminator {
			break
		}
		if vd[0] != vdPrimary && vd[0] != vdSupplementary {
			return nil, normalizeErr("unexpected volume descriptor type %d", vd[0])
		}
		if vd[0] == vdPrimary {
			volumeBlocks = binary.LittleEndian.Uint32(vd[80:84])
		}
		putDecDate(vd[813:830])
		putDecDate(vd[830:847])
		clearDecDate(vd[847:864])
		clearDecDate(vd[864:881])
		root := vd[156:190]
		putRecordDate(root[18:25])
		// Only the primary tree carries Rock Ridge (Joliet has no SUSP).
		if err := normalizeRoot(img, binary.LittleEndian.Uint32(root[2:6]), binary.LittleEndian.Uint32(root[10:14]), vd[0] == vdPrimary); err != nil {
			return nil, err
		}
	}
	size := int(volumeBlocks) * sectorSize
	switch {
	case volumeBlocks == 0:
		return nil, normalizeErr("no primary volume descriptor")
	case len(img) > size:
		// The padding sector memoryImage describes, past the last extent.
		if !allZero(img[size:]) {
			return nil, normalizeErr("image is %d bytes, more than its %d sectors", len(img), volumeBlocks)
		}
		img = img[:size]
	case len(img) < size:
		// The writer's last extent (a path table) needs not fill its sector.
		img = append(img, make([]byte, size-len(img))...)
	}
	return img, nil
}

func normalizeErr(format string, args ...any) error {
	return provider.Errorf(provider.ErrTransient, "nocloud: normalize the seed image: %s", fmt.Sprintf(format, args...))
}

func sectorAt(img []byte, n uint32) ([]byte, bool) {
	start := int64(n) * sectorSize
	if start+sectorSize > int64(len(img)) {
		return nil, false
	}
	return img[start : start+sectorSize], true
}

// normalizeRoot walks the root directory's records (no record crosses a
// sector; a zero length byte pads to the next one).
func normalizeRoot(img []byte, extent, size uint32, rockRidge bool) error {
	start := int64(extent) * sectorSize
	if start+int64(size) > int64(len(img)) {
		return normalizeErr("root directory beyond the image")
	}
	dir := img[start : start+int64(size)]
	for off := 0; off < len(dir); {
		l := int(dir[off])
		if l == 0 {
			off = (off/sectorSize + 1) * sectorSize
			continue
		}
		if l < 34 || off+l > len(dir) {
			return normalizeErr("bad directory record at %d", off)
		}
		r := dir[off : off+l]
		putRecordDate(r[18:25])
		nameLen := int(r[32])
		if 33+nameLen > l {
			return normalizeErr("bad file identifier at %d", off)
		}
		dot := nameLen == 1 && (r[33] == 0 || r[33] == 1)
		if r[25]&0x02 != 0 && !dot {
			return normalizeErr("the seed has a subdirectory")
		}
		if rockRidge {
			su := 33 + nameLen
			if nameLen%2 == 0 {
				su++ // padding field
			}
			if su > l {
				return normalizeErr("bad system use area at %d", off)
			}
			if err := normalizeSUSP(img, r[su:], 0); err != nil {
				return err
			}
		}
		off += l
	}
	return nil
}

// normalizeSUSP rewrites the PX and TF entries of one system use area and
// follows its continuation (CE) areas.
func normalizeSUSP(img, area []byte, depth int) error {
	for len(area) >= 4 && area[0] != 0 {
		l := int(area[2])
		if l < 4 || l > len(area) {
			return normalizeErr("bad SUSP entry %q", area[0:2])
		}
		e := area[:l]
		switch string(e[0:2]) {
		case "PX":
			if l < 36 {
				return normalizeErr("short PX entry")
			}
			mode := binary.LittleEndian.Uint32(e[4:8])
			perm := uint32(seedFileMode)
			if mode&0o170000 == 0o040000 {
				perm = seedDirMode
			}
			putBothEndian(e[4:12], mode&^0o7777|perm)
			putBothEndian(e[20:28], 0) // uid
			putBothEndian(e[28:36], 0) // gid
			if l >= 44 {
				putBothEndian(e[36:44], binary.LittleEndian.Uint32(e[36:40])) // serial
			}
		case "TF":
			flags := e[4]
			width := 7
			if flags&0x80 != 0 {
				width = 17
			}
			n := bits.OnesCount8(flags & 0x7f)
			if 5+n*width > l {
				return normalizeErr("short TF entry")
			}
			for k := range n {
				stamp := e[5+k*width : 5+(k+1)*width]
				if width == 17 {
					putDecDate(stamp)
				} else {
					putRecordDate(stamp)
				}
			}
		case "CE":
			if l < 28 || depth >= maxContinuations {
				return normalizeErr("bad CE entry")
			}
			start := int64(binary.LittleEndian.Uint32(e[4:8]))*sectorSize + int64(binary.LittleEndian.Uint32(e[12:16]))
			end := start + int64(binary.LittleEndian.Uint32(e[20:24]))
			if end > int64(len(img)) {
				return normalizeErr("CE area beyond the image")
			}
			if err := normalizeSUSP(img, img[start:end], depth+1); err != nil {
				return err
			}
		case "ST":
			return nil
		}
		area = area[l:]
	}
	return nil
}

// putBothEndian writes ECMA-119's 7.3.3 both-byte-order uint32.
func putBothEndian(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b[0:4], v)
	binary.BigEndian.PutUint32(b[4:8], v)
}

// putRecordDate writes SeedTime as a 7-byte directory record date (9.1.5).
func putRecordDate(b []byte) {
	t := SeedTime
	copy(b, []byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0})
}

// putDecDate writes SeedTime as a 17-byte volume descriptor date (8.4.26.1).
func putDecDate(b []byte) {
	t := SeedTime
	copy(b, fmt.Sprintf("%04d%02d%02d%02d%02d%02d00", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second()))
	b[16] = 0
}

// clearDecDate writes "not specified": sixteen '0' digits and a zero offset.
func clearDecDate(b []byte) {
	copy(b, "0000000000000000")
	b[16] = 0
}
