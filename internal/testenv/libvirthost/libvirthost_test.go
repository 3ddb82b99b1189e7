package libvirthost

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodEnv = `# written by up.sh
LIBVIRT_TEST_NAME=egress-lv
LIBVIRT_TEST_NETNS=egress-lv
LIBVIRT_TEST_STATE=/run/x
LIBVIRT_TEST_SSH_ADDR=127.0.0.1:2222
LIBVIRT_TEST_SSH_USER=root
LIBVIRT_TEST_SSH_KEY=/run/x/ssh/id_ed25519
LIBVIRT_TEST_SSH_KNOWN_HOSTS=/run/x/ssh/known_hosts
LIBVIRT_TEST_SOCKET=/run/x/run/libvirt-sock
LIBVIRT_TEST_URI=qemu:///system

LIBVIRT_TEST_POOL=egress-test
LIBVIRT_TEST_POOL_PATH=/run/x/pool
LIBVIRT_TEST_BRIDGE=eplvbr0
LIBVIRT_TEST_DOMAIN_TYPE=qemu
LIBVIRT_TEST_LOG_DIR=/run/x/log
LIBVIRT_TEST_QEMU_LOG_DIR=/run/x/libvirt/log/qemu
LIBVIRT_TEST_GUEST_DIR=/cache/debian12-abc
LIBVIRT_TEST_SOMETHING_NEWER=ignored
`

func TestParse(t *testing.T) {
	h, err := Parse([]byte(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if h.SSHAddr != "127.0.0.1:2222" || h.Socket != "/run/x/run/libvirt-sock" || h.DomainType != "qemu" || h.GuestDir != "/cache/debian12-abc" {
		t.Fatalf("parsed %+v", h)
	}
}

func TestParseRejects(t *testing.T) {
	for name, tc := range map[string]struct{ env, want string }{
		"missing key":     {strings.Replace(goodEnv, "LIBVIRT_TEST_POOL=egress-test\n", "", 1), "missing or empty: LIBVIRT_TEST_POOL"},
		"empty value":     {strings.Replace(goodEnv, "LIBVIRT_TEST_SOCKET=/run/x/run/libvirt-sock", "LIBVIRT_TEST_SOCKET=", 1), "missing or empty: LIBVIRT_TEST_SOCKET"},
		"not key=value":   {goodEnv + "garbage\n", `is not KEY=VALUE`},
		"bad domain type": {strings.Replace(goodEnv, "DOMAIN_TYPE=qemu", "DOMAIN_TYPE=xen", 1), "want qemu or kvm"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestLookupSkipsOnlyWithoutEnvFile: a missing host skips; a host that is
// there but broken, or a test outside its namespace, fails.
func TestLookupSkipsOnlyWithoutEnvFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.env")
	bad := filepath.Join(dir, "bad.env")
	absent := filepath.Join(dir, "absent.env")
	if err := os.WriteFile(good, []byte(goodEnv), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("LIBVIRT_TEST_NAME=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvVar {
				return v
			}
			return ""
		}
	}
	inside := func(string) (bool, error) { return true, nil }
	outside := func(string) (bool, error) { return false, nil }

	for name, tc := range map[string]struct {
		getenv      func(string) string
		defaultFile string
		inNS        func(string) (bool, error)
		wantSkip    bool
		wantErr     string
	}{
		"no variable, no default file":  {env(""), absent, inside, true, ""},
		"variable names a missing file": {env(absent), absent, inside, false, "does not exist"},
		"default file malformed":        {env(""), bad, inside, false, "missing or empty"},
		"variable file malformed":       {env(bad), absent, inside, false, "missing or empty"},
		"default file, outside the ns":  {env(""), good, outside, false, "outside its network namespace egress-lv"},
		"variable file, outside the ns": {env(good), absent, outside, false, "outside its network namespace"},
		"variable file, inside the ns":  {env(good), absent, inside, false, ""},
		"default file, inside the ns":   {env(""), good, inside, false, ""},
	} {
		t.Run(name, func(t *testing.T) {
			h, skip, err := lookup(tc.getenv, tc.defaultFile, tc.inNS)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("lookup: host %v, skip %q, err %v; want an error containing %q", h, skip, err, tc.wantErr)
				}
			case tc.wantSkip:
				if err != nil || h != nil || !strings.Contains(skip, "make test-libvirt") {
					t.Fatalf("lookup: host %v, skip %q, err %v; want a skip naming make test-libvirt", h, skip, err)
				}
			default:
				if err != nil || h == nil || skip != "" {
					t.Fatalf("lookup: host %v, skip %q, err %v; want the host", h, skip, err)
				}
			}
		})
	}
}

func TestInNamespace(t *testing.T) {
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		t.Skipf("no /proc/self/ns/net: %v", err)
	}
	if _, err := InNamespace("egress-no-such-namespace"); err == nil {
		t.Fatal("InNamespace of a namespace that does not exist: no error")
	}
}

func TestContained(t *testing.T) {
	const header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	// The kernel's unreachable entries on lo, as in a namespace with IPv6 off.
	const reject6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
	loopback := []net.Addr{&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)}}
	for name, tc := range map[string]struct {
		route4, route6 string
		addrs          []net.Addr
		want           string
	}{
		"loopback only":     {header, reject6, loopback, ""},
		"no ipv6 at all":    {header, "", loopback, ""},
		"an ipv4 route":     {header + "eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", reject6, loopback, "IPv4 routes"},
		"an ipv6 route":     {header, reject6 + "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n", loopback, "IPv6 route"},
		"a non-loopback ip": {header, reject6, append(loopback, &net.IPNet{IP: net.ParseIP("198.51.100.1"), Mask: net.CIDRMask(24, 32)}), "198.51.100.1/24"},
		"the bridge's documentation range": {header + "eplvbr0\t007100CB\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n", reject6,
			append(loopback, &net.IPNet{IP: net.ParseIP("203.0.113.1"), Mask: net.CIDRMask(24, 32)}), ""},
		"a route via the bridge's range": {header + "eplvbr0\t00000000\t017100CB\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", reject6, loopback, "IPv4 routes"},
		"a wider route":                  {header + "eplvbr0\t000000CB\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n", reject6, loopback, "IPv4 routes"},
	} {
		t.Run(name, func(t *testing.T) {
			err := contained([]byte(tc.route4), []byte(tc.route6), tc.addrs)
			if tc.want == "" && err != nil {
				t.Fatalf("contained: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("contained: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
