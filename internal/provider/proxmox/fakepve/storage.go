package fakepve

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

type storageDef struct {
	Storage
	content map[string]bool
}

func (d *storageDef) onNode(node string) bool {
	if len(d.Nodes) == 0 {
		return true
	}
	for _, n := range d.Nodes {
		if n == node {
			return true
		}
	}
	return false
}

func (d *storageDef) fileBased() bool {
	switch d.Type {
	case "dir", "nfs", "cifs", "glusterfs", "cephfs", "btrfs":
		return true
	}
	return false
}

// storeInst is one node's instance of a storage (the only one of a shared
// storage).
type storeInst struct {
	def    *storageDef
	node   string
	used   int64 // what the fake does not model
	full   bool
	active bool
	vols   map[string]*Volume // by volname
}

func (st *storeInst) usedBytes() int64 {
	u := st.used
	for _, v := range st.vols {
		u += v.Size
	}
	return u
}

func (st *storeInst) avail() int64 {
	if st.full {
		return 0
	}
	a := st.def.Capacity - st.usedBytes()
	if a < 0 {
		return 0
	}
	return a
}

func (s *Server) addStorageLocked(st Storage) {
	d := &storageDef{Storage: st, content: map[string]bool{}}
	for _, c := range st.Content {
		d.content[c] = true
	}
	s.storages = append(s.storages, d)
	if st.Shared {
		s.stores["*/"+st.ID] = &storeInst{def: d, used: st.Used, active: true, vols: map[string]*Volume{}}
		return
	}
	for _, n := range s.nodes {
		if d.onNode(n) {
			s.stores[n+"/"+st.ID] = &storeInst{def: d, node: n, used: st.Used, active: true, vols: map[string]*Volume{}}
		}
	}
}

func (s *Server) storageDef(id string) *storageDef {
	for _, d := range s.storages {
		if d.ID == id {
			return d
		}
	}
	return nil
}

// store is node's instance of storage id, nil if it has none.
func (s *Server) store(node, id string) *storeInst {
	if st := s.stores["*/"+id]; st != nil {
		if st.def.onNode(node) {
			return st
		}
		return nil
	}
	return s.stores[node+"/"+id]
}

// checkEnabled is storage_check_enabled: the storage exists, is on node
// and is not disabled.
func (s *Server) checkEnabled(id, node string) (*storeInst, *Error) {
	d := s.storageDef(id)
	if d == nil {
		return nil, StorageNotExist(id)
	}
	if !d.onNode(node) {
		return nil, StorageNotOnNode(id, node)
	}
	if d.Disable {
		return nil, StorageDisabled(id)
	}
	return s.store(node, id), nil
}

func (s *Server) putVolumeLocked(v Volume) error {
	st := s.store(v.Node, v.Storage)
	if st == nil {
		return fmt.Errorf("no storage %q on node %q", v.Storage, v.Node)
	}
	if v.Format == "" {
		v.Format = volumeFormat(v.Name)
	}
	if v.CTime == 0 {
		v.CTime = s.now().Unix()
	}
	if v.Data != nil && v.Size == 0 {
		v.Size = int64(len(v.Data))
	}
	st.vols[v.Name] = &v
	return nil
}

var reImageVMID = regexp.MustCompile(`(?:^|/)(?:vm|base)-(\d+)-`)

func volumeFormat(name string) string {
	switch {
	case strings.HasPrefix(name, "iso/"):
		return "iso"
	case strings.HasSuffix(name, ".qcow2"):
		return "qcow2"
	case strings.HasPrefix(name, "snippets/"):
		return "snippet"
	}
	return "raw"
}

func volumeContent(name string) string {
	switch {
	case strings.HasPrefix(name, "iso/"):
		return "iso"
	case strings.HasPrefix(name, "vztmpl/"):
		return "vztmpl"
	case strings.HasPrefix(name, "backup/"):
		return "backup"
	case strings.HasPrefix(name, "snippets/"):
		return "snippets"
	}
	return "images"
}

// ---- knobs ----

// PutVolume adds (or replaces) a volume, e.g. an orphaned seed ISO.
func (s *Server) PutVolume(v Volume) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putVolumeLocked(v)
}

// Volumes lists the volumes of node's instance of storage, by volid.
func (s *Server) Volumes(node, storage string) []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.store(node, storage)
	if st == nil {
		return nil
	}
	var out []Volume
	for _, v := range st.vols {
		c := *v
		c.Data = append([]byte(nil), v.Data...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SetStorageFull makes node's instance of storage report no free space and
// refuse allocations: uploads fail in their imgcopy task, full clones and
// disk growth in theirs.
func (s *Server) SetStorageFull(node, storage string, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.store(node, storage); st != nil {
		st.full = full
	}
}

// SetStorageActive sets whether node's instance of storage is active (an
// inactive one reports active 0 and no sizes, as an unmounted NFS does).
func (s *Server) SetStorageActive(node, storage string, active bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.store(node, storage); st != nil {
		st.active = active
	}
}

// ---- handlers ----

func contentString(d *storageDef) string { return strings.Join(d.Content, ",") }

// storageInfo is storage_info's entry for one storage on node.
func (s *Server) storageInfo(d *storageDef, node string) obj {
	st := s.store(node, d.ID)
	enabled := d.onNode(node) && !d.Disable
	o := obj{{"type", d.Type}, {"total", 0}, {"avail", 0}, {"used", 0},
		{"shared", boolInt(d.Shared)}, {"content", contentString(d)}, {"active", 0}, {"enabled", boolInt(enabled)}}
	if enabled && st != nil && st.active {
		o.set("total", num(fmt.Sprint(d.Capacity)))
		o.set("avail", num(fmt.Sprint(st.avail())))
		used := st.usedBytes()
		if st.full {
			used = d.Capacity
		}
		o.set("used", num(fmt.Sprint(used)))
		o.set("active", 1)
	}
	return o
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Server) storageIndex(c *call) (any, *Error) {
	var want []string
	if ct, ok := c.p["content"]; ok {
		want = splitList(ct)
	}
	if id, ok := c.p["storage"]; ok && s.storageDef(id) == nil {
		return nil, ParamErrors(map[string]string{"storage": "No such storage."})
	}
	ids := make([]string, 0, len(s.storages))
	for _, d := range s.storages {
		ids = append(ids, d.ID)
	}
	sort.Strings(ids)
	out := []any{}
	for _, id := range ids {
		d := s.storageDef(id)
		enabled := d.onNode(c.node) && !d.Disable
		if len(want) > 0 {
			match := false
			for _, w := range want {
				match = match || d.content[w]
			}
			if !match || !enabled {
				continue
			}
		}
		if s.check(c.req.authID, "/storage/"+id, true, "Datastore.Audit", "Datastore.AllocateSpace") != nil {
			continue
		}
		if sid, ok := c.p["storage"]; ok && sid != id {
			continue
		}
		if c.p["enabled"] == "1" && d.Disable {
			continue
		}
		info := s.storageInfo(d, c.node)
		e := obj{{"storage", id}}
		e = append(e, info...)
		if st := s.store(c.node, id); st != nil && st.active && enabled && d.Capacity > 0 {
			used := st.usedBytes()
			if st.full {
				used = d.Capacity
			}
			e = append(e, field{"used_fraction", float64(used) / float64(d.Capacity)})
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *Server) storageStatus(c *call) (any, *Error) {
	d := s.storageDef(c.p["storage"])
	if d == nil {
		return nil, ParamErrors(map[string]string{"storage": "No such storage."})
	}
	return s.storageInfo(d, c.node), nil
}

func (s *Server) storageContent(c *call) (any, *Error) {
	st, e := s.checkEnabled(c.p["storage"], c.node)
	if e != nil {
		return nil, e
	}
	out := []any{}
	if st == nil || !st.active {
		return out, nil
	}
	names := make([]string, 0, len(st.vols))
	for n := range st.vols {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	for _, n := range names {
		v := st.vols[n]
		ct := volumeContent(n)
		if want, ok := c.p["content"]; ok && want != ct {
			continue
		}
		if !st.def.content[ct] {
			continue
		}
		if vm, ok := c.p["vmid"]; ok && itoa(v.VMID) != vm {
			continue
		}
		o := obj{{"content", ct}, {"ctime", v.CTime}, {"format", v.Format}, {"size", v.Size},
			{"volid", st.def.ID + ":" + n}}
		if v.VMID != 0 {
			o = append(o, field{"vmid", v.VMID})
		}
		out = append(out, o)
	}
	return out, nil
}

// realVolumeID is Content.pm $real_volume_id.
func realVolumeID(storage, volume string) (volid, storeid string, err *Error) {
	if strings.Contains(volume, ":") {
		sid, _, ok := splitVolid(volume)
		if !ok {
			return "", "", ParamErrors(map[string]string{"volume": fmt.Sprintf("unable to parse volume ID '%s'\n", volume)})
		}
		if storage != "" && sid != storage {
			return "", "", ParamErrors(map[string]string{"volume": fmt.Sprintf("storage ID mismatch (%s != %s)\n", sid, storage)})
		}
		return volume, sid, nil
	}
	if storage == "" {
		return "", "", ParamErrors(map[string]string{"volume": "no storage specified - incomplete volume ID"})
	}
	return storage + ":" + volume, storage, nil
}

func (s *Server) deleteVolume(c *call) (any, *Error) {
	volid, sid, e := realVolumeID(c.p["storage"], c.p["volume"])
	if e != nil {
		return nil, e
	}
	st, e := s.checkEnabled(sid, c.node)
	if e != nil {
		return nil, e
	}
	_, volname, _ := splitVolid(volid)
	if st.def.fileBased() && volumeContent(volname) == "images" && !reImageVMID.MatchString(volname) {
		return nil, die("unable to parse directory volume name '%s'\n", volname)
	}
	if e := s.check(c.req.authID, "/storage/"+sid, false, "Datastore.Allocate"); e != nil {
		return nil, e
	}
	id := sid
	if m := reImageVMID.FindStringSubmatch(volname); m != nil {
		id = m[1] + "@" + sid
	}
	t := s.newTask(c, "imgdel", id, 0)
	t.onEnd = func() {
		if _, ok := st.vols[volname]; !ok {
			// free_image warns and returns; the task still ends OK.
			t.log(fmt.Sprintf("disk image '%s' does not exist", s.volumePath(st, volname)))
		}
		delete(st.vols, volname)
		t.log("Removed volume '" + volid + "'")
	}
	upid := s.launch(t)
	if d := c.p["delay"]; d != "" {
		return s.waitBriefly(t, d, "%s")
	}
	return upid, nil
}

func (s *Server) volumePath(st *storeInst, volname string) string {
	if st.def.fileBased() {
		dir := st.def.Path
		switch volumeContent(volname) {
		case "iso":
			return dir + "/template/" + volname
		case "images":
			return dir + "/images/" + volname
		}
		return dir + "/" + volname
	}
	return "/dev/" + st.def.ID + "/" + volname
}

var reISOExt = regexp.MustCompile(`(?i)[^/]+\.(?:iso|img)$`)
var reVztmplExt = regexp.MustCompile(`(?i)[^/]+\.(?:tar|tar\.(?:gz|xz|zst|bz2))$`)
var reUnsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// upload is pve-storage API2/Storage/Status.pm upload: storage enabled on
// the node, file-based, the file name normalised and its extension
// checked, the content type enabled; then an imgcopy task (id empty) that
// copies the file, overwriting one of the same name.
func (s *Server) uploadFile(c *call) (any, *Error) {
	st, e := s.checkEnabled(c.p["storage"], c.p["node"])
	if e != nil {
		return nil, e
	}
	if !st.def.fileBased() {
		return nil, die("can't upload to storage type '%s'\n", st.def.Type)
	}
	up := c.req.upload
	name := c.p["filename"]
	if i := strings.LastIndexAny(name, "/\\"); i >= 0 {
		name = name[i+1:]
	}
	name = reUnsafeName.ReplaceAllString(strings.TrimRight(name, "\n"), "_")
	content := c.p["content"]
	var volname string
	switch content {
	case "iso":
		if !reISOExt.MatchString(name) {
			return nil, ParamErrors(map[string]string{"filename": "wrong file extension"})
		}
		volname = "iso/" + name
	case "vztmpl":
		if !reVztmplExt.MatchString(name) {
			return nil, ParamErrors(map[string]string{"filename": "wrong file extension"})
		}
		volname = "vztmpl/" + name
	default:
		return nil, ParamErrors(map[string]string{"content": fmt.Sprintf("upload content type '%s' not allowed", content)})
	}
	if !st.def.content[content] {
		return nil, die("storage '%s' does not support '%s' content\n", st.def.ID, content)
	}
	node := c.p["node"]
	if node != s.nodes[0] {
		// The upload is not proxied: the file goes on with ssh/scp.
		if !s.hasNode(node) {
			return nil, NoSuchNode(node)
		}
		if e := s.offline[node]; e != nil {
			return nil, die("can't activate storage '%s' on node '%s': command '/usr/bin/ssh -e none -o 'BatchMode=yes' %s -- /usr/sbin/pvesm status --storage %s' failed: exit code 255\n",
				st.def.ID, node, node, st.def.ID)
		}
	}
	dest := s.volumePath(st, volname)
	data := append([]byte(nil), up.data...)
	t := s.newTask(c, "imgcopy", "", 0)
	tmp := "/var/tmp/pveupload-" + strings.ReplaceAll(randomUUID(), "-", "")
	t.log("starting file import from: " + tmp)
	t.log("target node: " + node)
	t.log("target file: " + dest)
	t.log(fmt.Sprintf("file size is: %d", len(data)))
	t.log(fmt.Sprintf("command: cp -- %s %s", tmp, dest))
	t.check = func() string {
		old := int64(0)
		if v := st.vols[volname]; v != nil {
			old = v.Size
		}
		if st.full || st.avail()+old < int64(len(data)) {
			return fmt.Sprintf("import failed: cp: error writing '%s': No space left on device", dest)
		}
		return ""
	}
	t.onEnd = func() {
		st.vols[volname] = &Volume{Node: st.node, Storage: st.def.ID, Name: volname, Size: int64(len(data)),
			Data: data, Format: volumeFormat(volname), CTime: s.now().Unix()}
	}
	t.okLine = "finished file import successfully"
	return s.launch(t), nil
}
