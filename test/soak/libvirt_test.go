package main

import "testing"

func TestParseVolume(t *testing.T) {
	tag := installationTag(installationID)
	if len(tag) != 10 {
		t.Fatalf("installationTag(%q) = %q, want 10 hex digits", installationID, tag)
	}
	uid := "0a1b2c3d-0000-4000-8000-000000000001"
	tests := []struct {
		name string
		want ourVolume
		ok   bool
	}{
		{"proxy-soak-cycle-0001-abc_" + tag + "_" + uid + "_disk.qcow2", ourVolume{instance: "proxy-soak-cycle-0001-abc", uid: uid, kind: "overlays"}, true},
		{"proxy-soak-cycle-0001-abc_" + tag + "_" + uid + "_seed.iso", ourVolume{instance: "proxy-soak-cycle-0001-abc", uid: uid, kind: "seed-isos"}, true},
		{"proxy-soak-cycle-0001-abc_" + installationTag("another") + "_" + uid + "_disk.qcow2", ourVolume{}, false}, // another installation's
		{"proxy-soak-cycle-0001-abc_" + tag + "_" + uid + "_other.img", ourVolume{}, false},
		{"egress-proxy-image_09bdaac4c460d7a65e718a130ea3d179154746e47c16b796a12bc046be49c970.qcow2", ourVolume{}, false}, // the image cache
		{"_" + tag + "_" + uid + "_disk.qcow2", ourVolume{}, false},
		{"proxy-x_" + tag + "__disk.qcow2", ourVolume{}, false},
	}
	for _, tt := range tests {
		got, ok := parseVolume(tt.name, tag)
		if tt.ok {
			tt.want.name = tt.name
		}
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseVolume(%q) = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
