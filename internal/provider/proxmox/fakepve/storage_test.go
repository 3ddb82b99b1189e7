package fakepve

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestUploadAndContent(t *testing.T) {
	e := newEnv(t)
	data := bytes.Repeat([]byte{7}, 364*1024)
	r := e.upload("pve1", "local", "iso", "../cidata 101.iso", data)
	if r.status != 200 || r.header.Get("Connection") != "" && r.header.Get("Connection") != "close" {
		t.Fatalf("upload: %s %v", r.line, r.header)
	}
	upid := r.dataString(t)
	if !strings.HasPrefix(upid, "UPID:pve1:") || !strings.HasSuffix(upid, ":imgcopy::root@pam!egress-operator:") {
		t.Fatalf("upload UPID %s: imgcopy with an empty id", upid)
	}
	if vols := e.s.Volumes("pve1", "local"); len(vols) != 0 {
		t.Fatalf("the file is there before its task ended: %v", vols)
	}
	e.waitOK("pve1", upid)
	vols := e.s.Volumes("pve1", "local")
	if len(vols) != 1 || vols[0].Name != "iso/cidata_101.iso" || !bytes.Equal(vols[0].Data, data) {
		t.Fatalf("volumes %v: the name is normalised (dirs cut, unsafe characters _)", vols)
	}
	list := e.ok("GET", "/nodes/pve1/storage/local/content", form("content", "iso")).data(t).([]any)
	if len(list) != 1 {
		t.Fatalf("content %v", list)
	}
	item := list[0].(map[string]any)
	if item["volid"] != "local:iso/cidata_101.iso" || item["size"] != float64(len(data)) || item["format"] != "iso" || item["content"] != "iso" {
		t.Fatalf("content item %v", item)
	}
	// The same name again overwrites.
	e.waitOK("pve1", e.upload("pve1", "local", "iso", "cidata_101.iso", []byte("new")).dataString(t))
	if vols := e.s.Volumes("pve1", "local"); len(vols) != 1 || string(vols[0].Data) != "new" {
		t.Fatalf("after a second upload: %v", vols)
	}
	log := e.ok("GET", "/nodes/pve1/tasks/"+url.PathEscape(upid)+"/log", nil).data(t).([]any)
	if last := log[len(log)-1].(map[string]any)["t"]; last != "TASK OK" {
		t.Fatalf("last log line %v", last)
	}
	for _, req := range e.s.Requests() {
		if req.Upload != nil && (req.Upload.Filename != "../cidata 101.iso" && req.Upload.Filename != "cidata_101.iso") {
			t.Fatalf("upload log %+v", req.Upload)
		}
		if strings.Contains(fmt.Sprintf("%+v", req), string(data[:64])) {
			t.Fatalf("the request log holds upload content")
		}
	}

	st := e.ok("GET", "/nodes/pve1/storage/local/status", nil).dataMap(t)
	if st["type"] != "dir" || st["active"] != float64(1) || st["enabled"] != float64(1) || st["content"] != "iso,vztmpl,backup,snippets" ||
		st["used"].(float64) != float64(12044009472+3) || st["avail"].(float64) != float64(100861726720-12044009472-3) {
		t.Fatalf("status %v", st)
	}
	if r := e.do("GET", "/nodes/pve1/storage/nas/status", nil); paramErrors(t, r)["storage"] != "No such storage." {
		t.Fatalf("status of an unknown storage: %s", r.body)
	}
	idx := e.ok("GET", "/nodes/pve1/storage", form("content", "iso")).data(t).([]any)
	if len(idx) != 1 || idx[0].(map[string]any)["storage"] != "local" {
		t.Fatalf("storages with iso content: %v", idx)
	}
	if idx := e.ok("GET", "/nodes/pve1/storage", nil).data(t).([]any); len(idx) != 2 {
		t.Fatalf("all storages: %v", idx)
	}
}

// Uploads as pve-http-server takes them: multipart with a Content-Length,
// the file part named "filename", Datastore.AllocateTemplate checked while
// authenticating.
func TestUploadWire(t *testing.T) {
	e := newEnv(t)
	multipartBody := func(field string) (*bytes.Buffer, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		_ = mw.WriteField("content", "iso")
		fw, _ := mw.CreateFormFile(field, "seed.iso")
		_, _ = fw.Write([]byte("x"))
		_ = mw.Close()
		return &b, mw.FormDataContentType()
	}
	post := func(body io.Reader, ctype string) reply {
		req, _ := http.NewRequest("POST", e.s.URL()+"/nodes/pve1/storage/local/upload", body)
		req.Header.Set("Authorization", e.tok)
		req.Header.Set("Content-Type", ctype)
		// A fresh connection each: the form upload below gets its
		// connection dropped, and a reused one can race that drop.
		req.Close = true
		return e.send(req)
	}
	b, ct := multipartBody("file")
	if r := post(b, ct); r.line != "501 upload failed" {
		t.Fatalf("file part not named filename: %s", r.line)
	}
	b, ct = multipartBody("filename")
	pr, pw := io.Pipe()
	go func() { _, _ = io.Copy(pw, b); pw.Close() }()
	if r := post(pr, ct); r.line != "501 chunked transfer encoding not supported" {
		t.Fatalf("streamed (chunked) upload: %s; PVE needs a Content-Length", r.line)
	}
	req, _ := http.NewRequest("POST", e.s.URL()+"/nodes/pve1/storage/local/upload", strings.NewReader("content=iso&filename=x.iso"))
	req.Header.Set("Authorization", e.tok)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if _, err := e.hc.Do(req); err == nil {
		t.Fatalf("a form upload got an answer; PVE dies in an eval that only warns and sends none")
	}
	if n := len(e.s.Requests()); e.s.Requests()[n-1].Status != 0 {
		t.Fatalf("dropped connection logged with status %d", e.s.Requests()[n-1].Status)
	}
	if r := e.upload("pve1", "local", "images", "x.raw", []byte("x")); paramErrors(t, r)["content"] !=
		"value 'images' does not have a value in the enumeration 'iso, vztmpl, import'" {
		t.Fatalf("content images: %s", r.body)
	}
	e.s.Revoke(DefaultTokenID, "/storage/local", "Datastore.AllocateTemplate")
	b, ct = multipartBody("filename")
	r := post(b, ct)
	if r.line != "403 Permission check failed (/storage/local, Datastore.AllocateTemplate)" || len(r.body) != 0 {
		t.Fatalf("upload without the privilege: %s %q (refused while authenticating: no body)", r.line, r.body)
	}
}

func TestStorageFull(t *testing.T) {
	w := DefaultWorld()
	w.Storages = append(w.Storages, Storage{ID: "thick", Type: "lvm", Content: []string{"images"}, Capacity: 2 << 30})
	e := newEnv(t, WithWorld(w))
	e.s.SetStorageFull("pve1", "local", true)
	st := e.ok("GET", "/nodes/pve1/storage/local/status", nil).dataMap(t)
	if st["avail"] != float64(0) || st["used"] != st["total"] {
		t.Fatalf("full storage status %v", st)
	}
	ex := e.wait("pve1", e.upload("pve1", "local", "iso", "seed.iso", []byte("x")).dataString(t))
	if ex != "import failed: cp: error writing '/var/lib/vz/template/iso/seed.iso': No space left on device" {
		t.Fatalf("upload to a full storage: %q", ex)
	}
	if vols := e.s.Volumes("pve1", "local"); len(vols) != 0 {
		t.Fatalf("a failed upload left %v", vols)
	}

	e.s.SetStorageFull("pve1", "local-lvm", true)
	upid := e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "101", "full", "1")).dataString(t)
	ex = e.wait("pve1", upid)
	if !strings.HasPrefix(ex, "clone failed: copy failed: command '/usr/bin/qemu-img convert") || !strings.HasSuffix(ex, "' failed: exit code 1") {
		t.Fatalf("full clone onto a full thin pool: %q", ex)
	}
	var sawNoSpace bool
	for _, ti := range e.s.Tasks() {
		if ti.UPID == upid {
			for _, l := range ti.Log {
				sawNoSpace = sawNoSpace || strings.HasSuffix(l, "No space left on device")
			}
		}
	}
	if !sawNoSpace {
		t.Fatalf("the task log does not say why the copy failed")
	}
	if _, ok := e.s.VM(101); ok {
		t.Fatalf("a failed clone left its entry")
	}
	e.s.SetStorageFull("pve1", "local-lvm", false)
	ex = e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "102", "full", "1", "storage", "thick")).dataString(t))
	if ex != `clone failed: lvcreate 'pve/vm-102-disk-0' error:   Volume group "pve" has insufficient free space (512 extents): 768 required.` {
		t.Fatalf("a 3 GiB full clone onto a 2 GiB LVM: %q", ex)
	}
	e.s.SetStorageFull("pve1", "thick", true)
	ex = e.wait("pve1", e.ok("POST", "/nodes/pve1/qemu/9000/clone", form("newid", "103", "full", "1", "storage", "thick")).dataString(t))
	if ex != "clone failed: not enough free space (0 < 3145728)" {
		t.Fatalf("a full clone onto a full LVM: %q", ex)
	}
}

func TestDeleteVolume(t *testing.T) {
	w := DefaultWorld()
	w.Volumes = []Volume{{Node: "pve1", Storage: "local", Name: "iso/cidata-101.iso", Size: 1024}}
	e := newEnv(t, WithWorld(w))
	del := e.ok("DELETE", "/nodes/pve1/storage/local/content/iso/cidata-101.iso", nil).dataString(t)
	if !strings.Contains(del, ":imgdel:local:") {
		t.Fatalf("UPID %s: imgdel with the storage as id", del)
	}
	e.waitOK("pve1", del)
	if len(e.s.Volumes("pve1", "local")) != 0 {
		t.Fatalf("not deleted")
	}
	// A missing volume is still a successful task; only the log says so.
	del = e.ok("DELETE", "/nodes/pve1/storage/local/content/local:iso/cidata-101.iso", nil).dataString(t)
	if ex := e.wait("pve1", del); ex != "OK" {
		t.Fatalf("delete of a missing volume: %q", ex)
	}
	log := e.ok("GET", "/nodes/pve1/tasks/"+del+"/log", nil).data(t).([]any)
	if l := log[0].(map[string]any)["t"]; l != "disk image '/var/lib/vz/template/iso/cidata-101.iso' does not exist" {
		t.Fatalf("log %v", log)
	}
	if r := e.do("DELETE", "/nodes/pve1/storage/local/content/local-lvm:vm-1-disk-0", nil); paramErrors(t, r)["volume"] != "storage ID mismatch (local-lvm != local)\n" {
		t.Fatalf("mismatched storage: %s", r.body)
	}
	e.s.Revoke(DefaultTokenID, "/storage/local", "Datastore.Allocate")
	r := e.do("DELETE", "/nodes/pve1/storage/local/content/iso/x.iso", nil)
	if r.line != "403 Permission check failed (/storage/local, Datastore.Allocate)" || r.header.Get("Content-Type") == "" {
		t.Fatalf("delete without Datastore.Allocate: %s (checked in the handler: a JSON body)", r.line)
	}
}
