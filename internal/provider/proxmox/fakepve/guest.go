package fakepve

import (
	"encoding/base64"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// The guest's files, as GET .../agent/file-read reads them through qemu-ga
// (guest-file-open, guest-file-read, guest-file-close).
//
// A guest runs the operator's serving reporter by default: until a test
// writes or removes servingreport.ReportPath on it (SetGuestFile,
// SetGuestReport, RemoveGuestFile), that path reads as a report, stamped
// with the fake's clock at the read, saying the proxy answers and
// cloud-init is done. So a VM whose agent reports an address is a healthy
// guest unless a test says otherwise. Files under /run are on a tmpfs: a
// stop removes them.

// maxReadSize is file-read's $MAX_READ_SIZE (16 MiB): the most one call
// reads, and count's maximum.
const maxReadSize = 16 << 20

// readChunk is what file-read asks guest-file-read for per round.
const readChunk = 1 << 20

// liveSquidVersion is what the default reporter says of Squid (Debian
// 12's, the template's distribution).
const liveSquidVersion = "5.7"

// SetGuestFile writes a file on VM vmid's guest. Writing
// servingreport.ReportPath replaces the default reporter's report for good
// (until Reset).
func (s *Server) SetGuestFile(vmid int, path string, content []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vms[vmid]; v != nil {
		v.writeFile(path, content)
		if path == servingreport.ReportPath {
			v.reportSet = true
		}
	}
}

// SetGuestReport writes r where the guest's reporter does
// (servingreport.Format at servingreport.ReportPath).
func (s *Server) SetGuestReport(vmid int, r servingreport.Report) {
	s.SetGuestFile(vmid, servingreport.ReportPath, []byte(servingreport.Format(r)))
}

// RemoveGuestFile removes a file from VM vmid's guest; removing
// servingreport.ReportPath leaves the guest without a report (as before
// cloud-init ran the vendor-data that installs the reporter).
func (s *Server) RemoveGuestFile(vmid int, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vms[vmid]; v != nil {
		delete(v.files, path)
		if path == servingreport.ReportPath {
			v.reportSet = true
		}
	}
}

// guestFile is the file at path on v's guest, and whether it exists.
func (s *Server) guestFile(v *vm, path string) ([]byte, bool) {
	if path == servingreport.ReportPath && !v.reportSet {
		now := s.now()
		return []byte(servingreport.Format(servingreport.Report{Serving: true, Checked: now, Answered: now,
			Version: liveSquidVersion, CloudInit: servingreport.CloudInitDone})), true
	}
	b, ok := v.files[path]
	return b, ok
}

// GuestFile is the file at path on VM vmid's guest, and whether it
// exists (the default reporter's report included).
func (s *Server) GuestFile(vmid int, path string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[vmid]
	if v == nil {
		return nil, false
	}
	b, ok := s.guestFile(v, path)
	return append([]byte(nil), b...), ok
}

func (v *vm) writeFile(path string, content []byte) {
	if v.files == nil {
		v.files = map[string][]byte{}
	}
	v.files[path] = append([]byte(nil), content...)
}

// stopped is what a stop does to the guest: /run is a tmpfs, and the
// agent's commands end with it.
func (v *vm) stopped() {
	for p := range v.files {
		if strings.HasPrefix(p, "/run/") {
			delete(v.files, p)
		}
	}
	v.procs = nil
}

// agentFileRead is GET .../agent/file-read: the VM's config, then
// agent_cmd's assert_agent_available and guest-file-open (mode "r"), an
// optional guest-file-seek to offset, guest-file-read in 1 MiB rounds up
// to count (default and at most 16 MiB) or the end of the file, then
// guest-file-close. The answer is {"content": ..., "bytes-read": n}, with
// "truncated": 1 when the reads stopped before the end; qemu-ga sees the
// end only on a read that gets less than it asked for, so a file of
// exactly count bytes reads as truncated, as on PVE. content is the bytes
// as Perl's strings of octets encode to JSON (each byte one character), or
// with decode=0 the rounds' base64 concatenated.
//
// Source: qemu-server src/PVE/API2/Qemu/Agent.pm file-read (9.2.6:
// count, decode, offset since 9.1, Feb 2026); qemu qga/commands-posix.c
// guest-file-open/read (eof is feof after fread).
func (s *Server) agentFileRead(c *call) (any, *Error) {
	v, e := s.agentCommand(c, "guest-file-open")
	if e != nil {
		return nil, e
	}
	path := c.p["file"]
	data, ok := s.guestFile(v, path)
	if !ok {
		return nil, GuestFileNotFound(path)
	}
	count := maxReadSize
	if n, ok := c.p["count"]; ok {
		count = atoi(n)
	}
	pos := 0
	if off, ok := c.p["offset"]; ok {
		// fseek past the end succeeds; the first read then gets nothing.
		pos = min(atoi(off), len(data))
	}
	decode := c.p["decode"] != "0"
	var content strings.Builder
	read, eof := 0, false
	for read < count && !eof {
		ask := min(count-read, readChunk)
		chunk := data[pos:min(pos+ask, len(data))]
		pos += len(chunk)
		eof = len(chunk) < ask
		read += len(chunk)
		switch {
		case len(chunk) == 0:
			// qemu-ga leaves buf-b64 out; decode_base64(undef) is "".
		case decode:
			content.WriteString(octets(chunk))
		default:
			content.WriteString(base64.StdEncoding.EncodeToString(chunk))
		}
	}
	out := obj{{"content", content.String()}, {"bytes-read", read}}
	if !eof {
		out = append(out, field{"truncated", 1})
	}
	return out, nil
}
