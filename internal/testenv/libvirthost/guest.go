package libvirthost

import (
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// What the tests of a guest on QEMU's user-mode network share: how they
// reach it (a port forward on the namespace's loopback, added through the
// QEMU monitor), what they ask its agent, and how they look at the pool.

const (
	// SlirpHost is the address under which a guest on QEMU's user-mode
	// network reaches the loopback of QEMU's host (here: the namespace's);
	// connections forwarded into the guest come from it too.
	SlirpHost = "10.0.2.2"
	// monitorHMP is VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP (libvirt-qemu.h).
	monitorHMP = 1
	// userNetdev is the netdev libvirt gives the domain's first NIC.
	userNetdev = "hostnet0"
)

// AgentAddress is the first IPv4 address, not loopback or link-local, that
// the guest agent reports on the NIC with the MAC.
func AgentAddress(l *libvirt.Libvirt, d libvirt.Domain, mac string) (netip.Addr, error) {
	ifaces, err := l.DomainInterfaceAddresses(d, uint32(libvirt.DomainInterfaceAddressesSrcAgent), 0)
	if err != nil {
		return netip.Addr{}, err
	}
	var seen []string
	for _, ifc := range ifaces {
		hw := ""
		if len(ifc.Hwaddr) > 0 {
			hw = ifc.Hwaddr[0]
		}
		for _, a := range ifc.Addrs {
			seen = append(seen, fmt.Sprintf("%s(%s)=%s/%d", ifc.Name, hw, a.Addr, a.Prefix))
			ip, err := netip.ParseAddr(a.Addr)
			if err != nil || !strings.EqualFold(hw, mac) || !ip.Is4() || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no IPv4 address on %s yet; the agent reports %v", mac, seen)
}

// DomainMAC is the MAC of the domain's first NIC, from its live XML.
func DomainMAC(l *libvirt.Libvirt, d libvirt.Domain) (string, error) {
	x, err := l.DomainGetXMLDesc(d, 0)
	if err != nil {
		return "", err
	}
	var dom struct {
		Interfaces []struct {
			MAC struct {
				Address string `xml:"address,attr"`
			} `xml:"mac"`
		} `xml:"devices>interface"`
	}
	if err := xml.Unmarshal([]byte(x), &dom); err != nil {
		return "", fmt.Errorf("domain %s XML: %w", d.Name, err)
	}
	if len(dom.Interfaces) == 0 || dom.Interfaces[0].MAC.Address == "" {
		return "", fmt.Errorf("domain %s has no NIC with a MAC", d.Name)
	}
	return dom.Interfaces[0].MAC.Address, nil
}

// AddForward forwards a free port on the namespace's loopback to the
// guest's guestPort, through the QEMU monitor (libvirt 9.0 rejects passt in
// domain XML, and slirp's <portForward> needs it), and returns the port.
// It works on a domain with one user-mode NIC.
func AddForward(t testing.TB, l *libvirt.Libvirt, d libvirt.Domain, guestPort int) int32 {
	t.Helper()
	port := testenv.FreePort(t)
	cmd := fmt.Sprintf("hostfwd_add %s tcp:127.0.0.1:%d-:%d", userNetdev, port, guestPort)
	out, err := l.QEMUDomainMonitorCommand(d, cmd, monitorHMP)
	if err != nil {
		t.Fatalf("%s on domain %s: %v", cmd, d.Name, err)
	}
	// HMP answers errors as text, with success.
	if s := strings.TrimSpace(out); s != "" {
		t.Fatalf("%s on domain %s: %s", cmd, d.Name, s)
	}
	return port
}

// ProxyClient sends every request through the HTTP proxy at
// 127.0.0.1:port, one connection per request.
func ProxyClient(port int32) *http.Client {
	proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(port))}
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}
}

// ProxyClientAs is ProxyClient sending user and password (HTTP basic, as
// Proxy-Authorization) with every request.
func ProxyClientAs(port int32, user, password string) *http.Client {
	c := ProxyClient(port)
	proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(port)), User: url.UserPassword(user, password)}
	c.Transport.(*http.Transport).Proxy = http.ProxyURL(proxyURL)
	return c
}

// GetBody is one GET of target through client: nil once the answer is a
// 200 with body want.
func GetBody(client *http.Client, target, want string) error {
	resp, err := client.Get(target)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != want {
		return fmt.Errorf("GET %s: %s %q", target, resp.Status, body)
	}
	return nil
}

// RequestFromGuest sends "GET target" from inside the guest to the proxy at
// guestAddr:port (so from the guest's own address, a source outside any
// allowedSourceRanges that name only SlirpHost), through the agent's
// guest-exec, and returns the raw answer.
func RequestFromGuest(t testing.TB, l *libvirt.Libvirt, d libvirt.Domain, guestAddr netip.Addr, port int, target string) string {
	t.Helper()
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%d && printf 'GET %s HTTP/1.0\r\n\r\n' >&3 && timeout 10 cat <&3`,
		guestAddr, port, target)
	return GuestExec(t, l, d, "/bin/bash", "-c", script)
}

// GuestExec runs a command in the guest through the agent's guest-exec
// and returns its stdout; a non-zero exit fails the test.
func GuestExec(t testing.TB, l *libvirt.Libvirt, d libvirt.Domain, path string, args ...string) string {
	t.Helper()
	cmd, err := json.Marshal(map[string]any{"execute": "guest-exec", "arguments": map[string]any{
		"path": path, "arg": args, "capture-output": true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.QEMUDomainAgentCommand(d, string(cmd), 10, 0)
	if err != nil || len(res) == 0 {
		t.Fatalf("guest-exec %s: %v", path, err)
	}
	var started struct {
		Return struct{ PID int } `json:"return"`
	}
	if err := json.Unmarshal([]byte(res[0]), &started); err != nil {
		t.Fatalf("guest-exec answer %q: %v", res[0], err)
	}
	var status struct {
		Return struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			OutData  string `json:"out-data"`
			ErrData  string `json:"err-data"`
		} `json:"return"`
	}
	testenv.EventuallyNil(t, "guest-exec "+path+" exits", func() error {
		res, err := l.QEMUDomainAgentCommand(d, fmt.Sprintf(`{"execute":"guest-exec-status","arguments":{"pid":%d}}`, started.Return.PID), 10, 0)
		if err != nil {
			return err
		}
		if len(res) == 0 {
			return errors.New("empty guest-exec-status answer")
		}
		if err := json.Unmarshal([]byte(res[0]), &status); err != nil {
			return err
		}
		if !status.Return.Exited {
			return errors.New("still running")
		}
		return nil
	})
	out, err := base64.StdEncoding.DecodeString(status.Return.OutData)
	if err != nil {
		t.Fatal(err)
	}
	if status.Return.ExitCode != 0 {
		errOut, _ := base64.StdEncoding.DecodeString(status.Return.ErrData)
		t.Fatalf("guest-exec %s %q: exit %d, stdout %q, stderr %q", path, args, status.Return.ExitCode, out, errOut)
	}
	return string(out)
}

// VolumeNames are the pool's volumes, sorted, as libvirtd knows them. No
// refresh: every volume of the tests is made and deleted through libvirt,
// and libvirtd refuses a refresh while a volume is being built ("pool has
// asynchronous jobs running"), which parallel tests always do somewhere.
func VolumeNames(t testing.TB, l *libvirt.Libvirt, pool libvirt.StoragePool) []string {
	t.Helper()
	vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(vols))
	for _, v := range vols {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	return names
}

// IsError says whether err is libvirt's error code.
func IsError(err error, code libvirt.ErrorNumber) bool {
	var le libvirt.Error
	return errors.As(err, &le) && le.Code == uint32(code)
}

// ImageServer serves the guest image over HTTP on the namespace's loopback
// (with Content-Length and HEAD, as a plain web server does), counting the
// image downloads.
func ImageServer(t testing.TB, g Guest) (imageURL string, downloads *atomic.Int32) {
	t.Helper()
	downloads = &atomic.Int32{}
	mux := http.NewServeMux()
	mux.HandleFunc("/guest.qcow2", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			downloads.Add(1)
		}
		http.ServeFile(w, r, g.Image)
	})
	srv := httptest.NewUnstartedServer(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/guest.qcow2", downloads
}

// Tail is the file's last n lines, or why it cannot be read.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RemoveDomain destroys and undefines the domain named name (with
// everything libvirt keeps beside it), if it is there; it reports whether
// it was.
func RemoveDomain(t testing.TB, l *libvirt.Libvirt, name string) bool {
	t.Helper()
	dom, err := l.DomainLookupByName(name)
	if IsError(err, libvirt.ErrNoDomain) {
		return false
	}
	if err != nil {
		t.Errorf("removing domain %s: %v", name, err)
		return false
	}
	if err := l.DomainDestroy(dom); err != nil && !IsError(err, libvirt.ErrOperationInvalid) {
		t.Errorf("destroying domain %s: %v", name, err)
	}
	if err := l.DomainUndefineFlags(dom, libvirt.DomainUndefineNvram|libvirt.DomainUndefineManagedSave|
		libvirt.DomainUndefineSnapshotsMetadata|libvirt.DomainUndefineCheckpointsMetadata); err != nil &&
		!IsError(err, libvirt.ErrNoDomain) {
		t.Errorf("undefining domain %s: %v", name, err)
	}
	return true
}

// RemoveVolumes deletes the pool's volumes whose names match, and returns
// their names. A volume libvirtd still allocates is waited for.
func RemoveVolumes(t testing.TB, l *libvirt.Libvirt, pool libvirt.StoragePool, match func(string) bool) []string {
	t.Helper()
	var removed []string
	for _, name := range VolumeNames(t, l, pool) {
		if !match(name) {
			continue
		}
		testenv.EventuallyNilWithin(t, 2*time.Minute, "deleting volume "+name, func() error {
			vol, err := l.StorageVolLookupByName(pool, name)
			if err == nil {
				err = l.StorageVolDelete(vol, 0)
			}
			if err == nil || IsError(err, libvirt.ErrNoStorageVol) {
				return nil
			}
			return err
		})
		removed = append(removed, name)
	}
	return removed
}
