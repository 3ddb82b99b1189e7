package fakepve_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/proxmox/fakepve"
)

// A provider's view with a plain net/http client: clone the template,
// follow the task, read the config, then the request log.
func Example() {
	fake := fakepve.New(fakepve.WithClock(func() time.Time { return time.Unix(1764074432, 0) })).Start()
	defer fake.Close()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: fake.CertPool()}}}
	defer hc.CloseIdleConnections()
	call := func(method, path string, form url.Values) (string, map[string]any) {
		req, _ := http.NewRequest(method, fake.URL()+path, strings.NewReader(form.Encode()))
		req.Header.Set("Authorization", fake.Token())
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := hc.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.Status, body
	}

	status, body := call("POST", "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"101"}, "name": {"egress-a"}})
	upid := body["data"].(string)
	fmt.Println(status, upid)
	for {
		_, st := call("GET", "/nodes/pve1/tasks/"+upid+"/status", nil)
		data := st["data"].(map[string]any)
		fmt.Println(data["status"], data["exitstatus"])
		if data["status"] == "stopped" {
			break
		}
	}
	_, cfg := call("GET", "/nodes/pve1/qemu/101/config", nil)
	fmt.Println(cfg["data"].(map[string]any)["scsi0"])
	status, body = call("GET", "/nodes/pve1/qemu/999/config", nil)
	fmt.Println(status)
	fmt.Printf("%q\n", body["message"])
	for _, r := range fake.Requests() {
		fmt.Println(r)
	}
	// Output:
	// 200 OK UPID:pve1:0022A5F1:06E0D1E1:6925A3C0:qmclone:9000:root@pam!egress-operator:
	// running <nil>
	// stopped OK
	// local-lvm:base-9000-disk-0/vm-101-disk-0,iothread=1,size=3G
	// 500 Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist
	// "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist\n"
	// POST /api2/json/nodes/pve1/qemu/9000/clone [name,newid] -> 200
	// GET /api2/json/nodes/pve1/tasks/UPID:pve1:0022A5F1:06E0D1E1:6925A3C0:qmclone:9000:root@pam!egress-operator:/status -> 200
	// GET /api2/json/nodes/pve1/tasks/UPID:pve1:0022A5F1:06E0D1E1:6925A3C0:qmclone:9000:root@pam!egress-operator:/status -> 200
	// GET /api2/json/nodes/pve1/qemu/101/config -> 200
	// GET /api2/json/nodes/pve1/qemu/999/config -> 500
}
