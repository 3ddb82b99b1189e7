package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Info is what inspect reports of an archive.
type Info struct {
	Ref      string        `json:"ref"`
	Digest   string        `json:"digest"`
	Platform *v1.Platform  `json:"platform,omitempty"`
	Config   v1.ConfigFile `json:"config"`
	Files    []File        `json:"files"`
}

// File is one entry of the image's layers.
type File struct {
	Path string `json:"path"`
	Type string `json:"type"` // dir, file, symlink, other
	Mode int64  `json:"mode"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Size int64  `json:"size,omitempty"`
	Link string `json:"link,omitempty"`
	// MTime is the entry's mtime in seconds since 1970 (0 in our images).
	MTime int64 `json:"mtime"`
}

// Inspect reads an archive Build wrote (or any single-image OCI archive
// with gzip layers) and checks each blob against its digest.
func Inspect(archive string) (*Info, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			files[h.Name] = b
		}
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if len(index.Manifests) != 1 {
		return nil, fmt.Errorf("index.json lists %d manifests, want 1", len(index.Manifests))
	}
	desc := index.Manifests[0]
	blob := func(h v1.Hash) ([]byte, error) {
		b, ok := files["blobs/"+h.Algorithm+"/"+h.Hex]
		if !ok {
			return nil, fmt.Errorf("blob %s is missing", h)
		}
		got, _, err := v1.SHA256(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		if got != h {
			return nil, fmt.Errorf("blob %s has digest %s", h, got)
		}
		return b, nil
	}
	raw, err := blob(desc.Digest)
	if err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	info := &Info{Ref: desc.Annotations[annotationContainerdName], Digest: desc.Digest.String(), Platform: desc.Platform}
	rawCfg, err := blob(m.Config.Digest)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(rawCfg, &info.Config); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	for _, l := range m.Layers {
		b, err := blob(l.Digest)
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
			}
			info.Files = append(info.Files, fileOf(h))
		}
	}
	return info, nil
}

func fileOf(h *tar.Header) File {
	f := File{Path: "/" + trimSlash(h.Name), Mode: h.Mode, UID: h.Uid, GID: h.Gid, Size: h.Size, Link: h.Linkname, MTime: h.ModTime.Unix()}
	switch h.Typeflag {
	case tar.TypeDir:
		f.Type = "dir"
	case tar.TypeReg:
		f.Type = "file"
	case tar.TypeSymlink:
		f.Type = "symlink"
	default:
		f.Type = "other"
	}
	return f
}

func trimSlash(s string) string {
	return strings.Trim(path.Clean("/"+s), "/")
}
