package nocloud

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func both(v uint32) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b[0:4], v)
	binary.BigEndian.PutUint32(b[4:8], v)
	return b
}

// px is a 44-byte RRIP 1.12 PX entry as go-diskfs v1.9.4 writes it (the
// serial little-endian in 8 bytes, so its big-endian half is zero).
func px(mode, uid, gid uint32, serial uint32) []byte {
	e := []byte{'P', 'X', 44, 1}
	e = append(e, both(mode)...)
	e = append(e, both(1)...)
	e = append(e, both(uid)...)
	e = append(e, both(gid)...)
	s := make([]byte, 8)
	binary.LittleEndian.PutUint64(s, uint64(serial))
	return append(e, s...)
}

func tfShort(stamps int) []byte {
	flags := byte(0)
	for i := range stamps {
		flags |= 1 << (i + 1)
	}
	e := []byte{'T', 'F', byte(5 + 7*stamps), 1, flags}
	for range stamps {
		e = append(e, 126, 12, 1, 9, 30, 19, 4) // 2026-12-01 09:30:19 +01:00
	}
	return e
}

func tfLong() []byte {
	e := []byte{'T', 'F', 5 + 17, 1, 0x80 | 0x02}
	return append(e, []byte("2026120109301914\x04")...)
}

var seedRecordDate = []byte{70, 1, 1, 0, 0, 0, 0}

func TestNoCloudSeed_NormalizeSUSP(t *testing.T) {
	wantPX := func(mode uint32, serial uint32) []byte {
		e := []byte{'P', 'X', 44, 1}
		e = append(e, both(mode)...)
		e = append(e, both(1)...)
		e = append(e, both(0)...)
		e = append(e, both(0)...)
		return append(e, both(serial)...)
	}
	wantTF := func(stamps int) []byte {
		e := tfShort(stamps)
		for i := range stamps {
			copy(e[5+7*i:], seedRecordDate)
		}
		return e
	}
	tests := []struct {
		name    string
		area    []byte
		want    []byte
		wantErr string
	}{
		{name: "file: owner, group and mode fixed, serial both-endian",
			area: px(0o100644, 1234, 5678, 7), want: wantPX(0o100400, 7)},
		{name: "directory keeps its type",
			area: px(0o040700, 1000, 1000, 0), want: wantPX(0o040500, 0)},
		{name: "three short timestamps",
			area: tfShort(3), want: wantTF(3)},
		{name: "long-form timestamp",
			area: tfLong(), want: append([]byte{'T', 'F', 22, 1, 0x82}, []byte("1970010100000000\x00")...)},
		{name: "other entries untouched, PX after NM",
			area: append([]byte{'N', 'M', 7, 1, 0, 'a', 'b'}, px(0o100600, 1, 1, 3)...),
			want: append([]byte{'N', 'M', 7, 1, 0, 'a', 'b'}, wantPX(0o100400, 3)...)},
		{name: "ST ends the area", area: append([]byte{'S', 'T', 4, 1}, tfShort(1)...), want: append([]byte{'S', 'T', 4, 1}, tfShort(1)...)},
		{name: "trailing zero padding", area: append(tfShort(1), 0, 0, 0, 0), want: append(wantTF(1), 0, 0, 0, 0)},
		{name: "entry shorter than its header", area: []byte{'P', 'X', 2, 1}, wantErr: "bad SUSP entry"},
		{name: "entry longer than the area", area: []byte{'P', 'X', 44, 1, 0}, wantErr: "bad SUSP entry"},
		{name: "short PX", area: []byte{'P', 'X', 8, 1, 0, 0, 0, 0}, wantErr: "short PX"},
		{name: "TF claiming more stamps than it holds", area: []byte{'T', 'F', 12, 1, 0x0e, 0, 0, 0, 0, 0, 0, 0}, wantErr: "short TF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			area := bytes.Clone(tt.area)
			err := normalizeSUSP(nil, area, 0)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(area, tt.want) {
				t.Fatalf("area =\n% x\nwant\n% x", area, tt.want)
			}
		})
	}
}

func TestNoCloudSeed_NormalizeFollowsContinuation(t *testing.T) {
	img := make([]byte, 2*sectorSize)
	copy(img[sectorSize+100:], px(0o100644, 42, 42, 1))
	ce := []byte{'C', 'E', 28, 1}
	ce = append(ce, both(1)...)   // sector
	ce = append(ce, both(100)...) // offset
	ce = append(ce, both(44)...)  // length
	if err := normalizeSUSP(img, ce, 0); err != nil {
		t.Fatal(err)
	}
	got := img[sectorSize+100 : sectorSize+144]
	if uid := binary.LittleEndian.Uint32(got[20:24]); uid != 0 {
		t.Fatalf("PX in the continuation area kept uid %d", uid)
	}

	beyond := []byte{'C', 'E', 28, 1}
	beyond = append(beyond, both(5)...)
	beyond = append(beyond, both(0)...)
	beyond = append(beyond, both(44)...)
	if err := normalizeSUSP(img, beyond, 0); err == nil || !strings.Contains(err.Error(), "beyond the image") {
		t.Fatalf("a CE beyond the image: error = %v", err)
	}
}
