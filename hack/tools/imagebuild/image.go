package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options are what the image config says besides the layer.
type Options struct {
	Ref        string
	Platform   string
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
	WorkingDir string
	Created    time.Time
}

// Annotations on the index descriptor: containerd's import names the image
// after the first, OCI tools after the second.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// Image builds the image of spec with o: one layer, OCI media types.
func Image(spec *Spec, o Options) (v1.Image, error) {
	plat, err := v1.ParsePlatform(o.Platform)
	if err != nil {
		return nil, fmt.Errorf("platform %q: %w", o.Platform, err)
	}
	raw, err := spec.Layer()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "imagebuild (hack/tools/imagebuild)"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = plat.OS, plat.Architecture, plat.Variant, plat.OSVersion
	cf.Config = v1.Config{
		User:       o.User,
		Entrypoint: o.Entrypoint,
		Cmd:        o.Cmd,
		Env:        o.Env,
		Labels:     o.Labels,
		WorkingDir: o.WorkingDir,
	}
	return mutate.ConfigFile(img, cf)
}

// Build writes the image as an OCI archive (a tar of an OCI image layout)
// to out and returns its manifest digest.
func Build(spec *Spec, o Options, out string) (string, error) {
	ref, err := NormalizeRef(o.Ref)
	if err != nil {
		return "", err
	}
	img, err := Image(spec, o)
	if err != nil {
		return "", err
	}
	plat, err := v1.ParsePlatform(o.Platform)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	if err := WriteArchive(f, img, ref, plat); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// WriteArchive writes img as the only image of an OCI layout, in a tar
// written like the layer: sorted entries, mtime 0, root-owned.
func WriteArchive(w io.Writer, img v1.Image, ref string, plat *v1.Platform) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	blobs := map[string][]byte{digest.Hex: manifest, cfgName.Hex: cfg}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		blobs[d.Hex] = b
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType:   mt,
			Size:        int64(len(manifest)),
			Digest:      digest,
			Platform:    plat,
			Annotations: map[string]string{annotationContainerdName: ref, annotationRefName: tag},
		}},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	put := func(name string, typ byte, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := put("blobs/", tar.TypeDir, 0o755, nil); err != nil {
		return err
	}
	if err := put("blobs/sha256/", tar.TypeDir, 0o755, nil); err != nil {
		return err
	}
	names := make([]string, 0, len(blobs))
	for h := range blobs {
		names = append(names, h)
	}
	slices.Sort(names)
	for _, h := range names {
		if err := put("blobs/sha256/"+h, tar.TypeReg, 0o644, blobs[h]); err != nil {
			return err
		}
	}
	if err := put("index.json", tar.TypeReg, 0o644, index); err != nil {
		return err
	}
	if err := put("oci-layout", tar.TypeReg, 0o644, []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return tw.Close()
}

// NormalizeRef spells ref the way containerd and the kubelet do, so the
// imported image is found under the name a Pod spec uses:
// "egress-proxies-operator:dev" is docker.io/library/egress-proxies-operator:dev.
// A tag is required: an untagged image would be :latest, which the kubelet
// always tries to pull.
func NormalizeRef(ref string) (string, error) {
	if ref == "" || strings.ContainsAny(ref, "@ \t") {
		return "", fmt.Errorf("reference %q: want [registry/]name:tag", ref)
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon < 0 || colon < slash || colon == len(ref)-1 {
		return "", fmt.Errorf("reference %q has no tag", ref)
	}
	first, _, hasSlash := strings.Cut(ref, "/")
	if hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref, nil
	}
	if !hasSlash {
		return "docker.io/library/" + ref, nil
	}
	return "docker.io/" + ref, nil
}
