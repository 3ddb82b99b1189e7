package squid

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// memberRequest is a group member's request on a pooled entry.
func memberRequest() provider.CreateRequest {
	return provider.CreateRequest{
		Port: 3128, AllowedSourceRanges: []string{"192.0.2.0/24"},
		StaticAddress: &provider.StaticAddress{Address: netip.MustParsePrefix("192.0.2.10/24"), Gateway: netip.MustParseAddr("192.0.2.1")},
		GroupAddress: &provider.GroupAddress{
			Virtual: netip.MustParsePrefix("192.0.2.100/24"),
			Peers:   []netip.Addr{netip.MustParseAddr("192.0.2.11")},
			Group:   "0d5c3f7e-uid", Index: 1,
		},
	}
}

// A group member's user-data installs keepalived beside Squid, writes its
// configuration (the member's pool address as the source, the peers, the
// group's address on the seed's NIC), the check and the non-local bind,
// applies the sysctl before Squid starts and starts keepalived after it;
// Squid egresses from the group's address.
func TestUserData_GroupMember(t *testing.T) {
	got, err := UserData(memberRequest(), nil, FamilyDebian, "")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := parseCloudConfig(t, got.Reveal())
	if !slices.Equal(d.Packages, []string{"squid", "keepalived"}) {
		t.Errorf("packages %v, want squid and keepalived", d.Packages)
	}
	files := map[string]string{}
	for _, f := range d.WriteFiles {
		files[f.Path] = f.Permissions
		if f.Owner != "root:root" {
			t.Errorf("%s is owned by %s", f.Path, f.Owner)
		}
	}
	for path, mode := range map[string]string{vrrp.ConfigPath: "0644", vrrp.PeersPath: "0644", vrrp.CheckPath: "0755", vrrp.SysctlPath: "0644"} {
		if files[path] != mode {
			t.Errorf("write_files %s: permissions %q, want %q (files %v)", path, files[path], mode, files)
		}
	}
	var conf, peers string
	for _, f := range d.WriteFiles {
		switch f.Path {
		case vrrp.ConfigPath:
			conf = f.Content
		case vrrp.PeersPath:
			peers = f.Content
		case vrrp.CheckPath:
			if f.Content != vrrp.Check() {
				t.Errorf("the check differs from vrrp.Check:\n%s", f.Content)
			}
		case vrrp.SysctlPath:
			if f.Content != "net.ipv4.ip_nonlocal_bind = 1\n" {
				t.Errorf("sysctl %q", f.Content)
			}
		}
	}
	if want := "unicast_src_ip 192.0.2.10\nunicast_peer {\n    192.0.2.11\n}\n"; !strings.HasSuffix(peers, want) {
		t.Errorf("%s is\n%s\nwant it to end in\n%s", vrrp.PeersPath, peers, want)
	}
	for _, want := range []string{
		"interface eth0\n", "    include " + vrrp.PeersPath + "\n",
		"        192.0.2.100/24 dev eth0\n", "priority 224\n",
		"virtual_router_id " + strconv.Itoa(int(vrrp.RouterID("0d5c3f7e-uid"))) + "\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("keepalived.conf lacks %q:\n%s", want, conf)
		}
	}
	if sq := squidConfOf(t, d); !strings.Contains(sq, "\ntcp_outgoing_address 192.0.2.100\n") {
		t.Errorf("squid.conf does not egress from the group's address:\n%s", sq)
	}
	cmds := runcmdLines(d)
	at := func(c string) int {
		i := slices.Index(cmds, c)
		if i < 0 {
			t.Fatalf("runcmd lacks %q: %v", c, cmds)
		}
		return i
	}
	if !slices.Equal(d.Bootcmd, []any{"sysctl -w net.ipv4.ip_nonlocal_bind=1"}) {
		t.Errorf("bootcmd %v, want the non-local bind set before the image's Squid starts", d.Bootcmd)
	}
	if !(at("systemctl restart squid.service") < at("systemctl restart keepalived.service") &&
		at("systemctl restart squid.service") < at("systemctl restart keepalived.service") &&
		at(enableUnit("keepalived.service")) < at("systemctl restart keepalived.service")) {
		t.Errorf("runcmd order: %v", cmds)
	}

	// Not a member: nothing of it.
	plain := memberRequest()
	plain.GroupAddress = nil
	got, err = UserData(plain, nil, FamilyDebian, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"keepalived", "tcp_outgoing_address", "ip_nonlocal_bind"} {
		if strings.Contains(got.Reveal(), s) {
			t.Errorf("a plain instance's user-data holds %q", s)
		}
	}
}

func TestUserData_GroupMemberRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*provider.CreateRequest)
		want string
	}{
		{"no pool address", func(r *provider.CreateRequest) { r.StaticAddress = nil }, "has none: give the entry an addressPool"},
		{"its own cloud-init", func(r *provider.CreateRequest) { r.CloudInit = "#cloud-config\n" }, "drop the template's cloudInit"},
		{"itself among its peers", func(r *provider.CreateRequest) {
			r.GroupAddress.Peers = []netip.Addr{netip.MustParseAddr("192.0.2.10")}
		}, "peers[0]: 192.0.2.10 is the member's own address"},
		{"the group's address of another family", func(r *provider.CreateRequest) {
			r.GroupAddress.Virtual = netip.MustParsePrefix("2001:db8::100/64")
		}, "different families"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := memberRequest()
			tc.edit(&req)
			_, err := UserData(req, nil, FamilyDebian, "")
			if err == nil || !errors.Is(err, provider.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UserData = %v, want Permanent naming %q", err, tc.want)
			}
		})
	}
}
