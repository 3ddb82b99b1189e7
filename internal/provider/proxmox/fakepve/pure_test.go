package fakepve

import "testing"

func TestJSONAsPerlWritesIt(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{obj{{"data", nil}, {"message", "a/b <x> & 'y' \"z\"\n\t\x01"}}, `{"data":null,"message":"a/b <x> & 'y' \"z\"\n\t\u0001"}`},
		{"grüße \u2028", "\"grüße \u2028\""},
		{0.0249060195469461, "0.0249060195469461"},
		{1.0 / 3, "0.333333333333333"},
		{2147483648.0, "2147483648"},
		{0.00001, "1e-05"},
		{num("42"), "42"},
		{[]any{}, "[]"},
		{map[string]string{"b": "2", "a": "1"}, `{"a":"1","b":"2"}`},
	} {
		if got := string(encodeJSON(c.v)); got != c.want {
			t.Errorf("%#v: %s, want %s", c.v, got, c.want)
		}
	}
}

func TestPropertyStrings(t *testing.T) {
	d, ok := parseDrive("local-lvm:vm-101-disk-0,iothread=1,size=20G")
	if !ok || d.file != "local-lvm:vm-101-disk-0" || d.opt("size") != "20G" || d.String() != "local-lvm:vm-101-disk-0,iothread=1,size=20G" {
		t.Fatalf("parseDrive: %+v %v", d, ok)
	}
	if _, ok := parseDrive("file=local:iso/x.iso,media=cdrom"); !ok {
		t.Fatalf("file= form refused")
	}
	for _, bad := range []string{"", ",size=1G", "local:x,,", "local:x,size"} {
		if _, ok := parseDrive(bad); ok {
			t.Errorf("parseDrive(%q) accepted", bad)
		}
	}
	for in, want := range map[string]int64{"3G": 3 << 30, "364K": 364 << 10, "1.5G": 3 << 29, "512": 512, "2T": 2 << 40} {
		if got, ok := parseSize(in); !ok || got != want {
			t.Errorf("parseSize(%q) = %d, want %d", in, got, want)
		}
	}
	for in, want := range map[int64]string{3 << 30: "3G", 372736: "364K", 10: "10", 1 << 20: "1M", 1536 << 20: "1536M"} {
		if got := formatSize(in); got != want {
			t.Errorf("formatSize(%d) = %s, want %s", in, got, want)
		}
	}
	if m := memoryMiB(vmConfig{{"memory", "current=4096,hotplug=1"}}); m != 4096 {
		t.Errorf("memory current=: %d", m)
	}
	if !agentEnabled(vmConfig{{"agent", "enabled=1,fstrim_cloned_disks=1"}}) || agentEnabled(vmConfig{{"agent", "0"}}) {
		t.Errorf("agentEnabled")
	}
	if got := checkFormat("agent", "agent", "1"); got != "" {
		t.Errorf("agent 1: %q", got)
	}
	if got := checkFormat("net0", "net", "virtio=BC:24:11:2E:C5:4A,bridge=vmbr0,firewall=1,tag=20"); got != "" {
		t.Errorf("a valid net0: %q", got)
	}
	if got := checkFormat("net0", "net", "virtio=nope,bridge=vmbr0"); got != "format error\nnet0.macaddr: value does not look like a valid unicast MAC address\n" {
		t.Errorf("bad MAC: %q", got)
	}
	if got := linkLocal("bc:24:11:2e:c5:4a"); got != "fe80::be24:11ff:fe2e:c54a" {
		t.Errorf("linkLocal: %s", got)
	}
	if got := renderBytes(3 << 30); got != "3.0 GiB" {
		t.Errorf("renderBytes: %s", got)
	}
}

// The path patterns' table is fakehttp's TestMatchPath.
func TestSplitAPIPath(t *testing.T) {
	for _, c := range []struct{ path, format, rel string }{
		{"/api2/json/version", "json", "/version"},
		{"/api2/json/", "json", "/"},
		{"/api2/extjs/nodes/", "extjs", "/nodes"},
	} {
		f, r, ok := splitAPIPath(c.path)
		if !ok || f != c.format || r != c.rel {
			t.Errorf("splitAPIPath(%q) = %q %q %v", c.path, f, r, ok)
		}
	}
	if _, _, ok := splitAPIPath("/api2"); ok {
		t.Errorf("/api2 has no format")
	}
}
