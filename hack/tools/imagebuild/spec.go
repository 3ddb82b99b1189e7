package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A spec lists what the layer holds, one entry a line ('#' starts a
// comment). Paths are absolute; modes octal; owners numeric uid:gid:
//
//	dir     /tmp 1777 0:0
//	file    /manager 0755 0:0 bin/image/manager
//	tree    /usr/share/squid/icons /usr/share/squid/icons
//	symlink /usr/sbin/squid3 squid
//
// A file's content is read from its source; its mode and owner are the
// spec's, never the host file's. tree copies a host directory: directories
// 0755, files keep their permission bits, symlinks stay symlinks, all owned
// by 0:0. Missing parent directories are added as 0755 0:0.
type Spec struct {
	entries map[string]entry
}

type entry struct {
	path     string // absolute, cleaned
	typ      byte   // tar.TypeDir, tar.TypeReg, tar.TypeSymlink
	mode     int64
	uid, gid int
	src      string // host file of a regular file
	link     string // target of a symlink
}

// epoch is every entry's mtime: the same content gives the same layer
// whenever and wherever it is built.
var epoch = time.Unix(0, 0).UTC()

// ParseSpec reads a spec; every error names its line.
func ParseSpec(r io.Reader) (*Spec, error) {
	s := &Spec{entries: map[string]entry{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if err := s.parseLine(f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	s.addParents()
	return s, nil
}

func (s *Spec) parseLine(f []string) error {
	want := map[string]int{"dir": 4, "file": 5, "tree": 3, "symlink": 3}
	n, ok := want[f[0]]
	if !ok {
		return fmt.Errorf("unknown kind %q: want dir, file, tree or symlink", f[0])
	}
	if len(f) != n {
		return fmt.Errorf("%s takes %d fields, got %d", f[0], n-1, len(f)-1)
	}
	p, err := cleanPath(f[1])
	if err != nil {
		return err
	}
	switch f[0] {
	case "dir", "file":
		mode, err := strconv.ParseInt(f[2], 8, 64)
		if err != nil || mode < 0 || mode > 07777 {
			return fmt.Errorf("mode %q: want octal permission bits", f[2])
		}
		uid, gid, err := parseOwner(f[3])
		if err != nil {
			return err
		}
		e := entry{path: p, typ: tar.TypeDir, mode: mode, uid: uid, gid: gid}
		if f[0] == "file" {
			e.typ, e.src = tar.TypeReg, f[4]
			st, err := os.Stat(e.src)
			if err != nil {
				return err
			}
			if !st.Mode().IsRegular() {
				return fmt.Errorf("%s is not a regular file", e.src)
			}
		}
		return s.add(e)
	case "symlink":
		return s.add(entry{path: p, typ: tar.TypeSymlink, mode: 0777, link: f[2]})
	default: // tree
		return s.addTree(p, f[2])
	}
}

func (s *Spec) addTree(dst, src string) error {
	return filepath.WalkDir(src, func(hp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, hp)
		if err != nil {
			return err
		}
		p := path.Join(dst, filepath.ToSlash(rel))
		switch t := d.Type(); {
		case t.IsDir():
			return s.add(entry{path: p, typ: tar.TypeDir, mode: 0755})
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(hp)
			if err != nil {
				return err
			}
			return s.add(entry{path: p, typ: tar.TypeSymlink, mode: 0777, link: target})
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return s.add(entry{path: p, typ: tar.TypeReg, mode: int64(info.Mode().Perm()), src: hp})
		default:
			return fmt.Errorf("%s: neither a file, a directory nor a symlink", hp)
		}
	})
}

// add refuses a second, different entry for a path: which one won would
// depend on the spec's order, and a mistake should not pass silently.
func (s *Spec) add(e entry) error {
	if old, ok := s.entries[e.path]; ok && old != e {
		return fmt.Errorf("%s is listed twice, differently", e.path)
	}
	s.entries[e.path] = e
	return nil
}

func (s *Spec) addParents() {
	for p := range s.entries {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := s.entries[d]; !ok {
				s.entries[d] = entry{path: d, typ: tar.TypeDir, mode: 0755}
			}
		}
	}
}

func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("the root itself cannot be an entry")
	}
	return c, nil
}

func parseOwner(s string) (int, int, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("owner %q: want numeric uid:gid", s)
	}
	return uid, gid, nil
}

// sorted are the entries parents first, then by path component, so the
// order depends on the paths alone.
func (s *Spec) sorted() []entry {
	out := make([]entry, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int {
		return slices.Compare(strings.Split(a.path, "/"), strings.Split(b.path, "/"))
	})
	return out
}

// Layer writes the uncompressed layer tar: sorted entries, mtime 0, numeric
// owners with no names, so the bytes depend only on paths, modes, owners
// and contents.
func (s *Spec) Layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range s.sorted() {
		h := &tar.Header{
			Name:     strings.TrimPrefix(e.path, "/"),
			Typeflag: e.typ,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			ModTime:  epoch,
			Linkname: e.link,
		}
		var content []byte
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			b, err := os.ReadFile(e.src)
			if err != nil {
				return nil, err
			}
			content, h.Size = b, int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", e.path, err)
		}
		if _, err := tw.Write(content); err != nil {
			return nil, fmt.Errorf("%s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
