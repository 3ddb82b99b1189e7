// Package servingreport is the VM providers' serving signal
// (docs/provider-contract.md, "The serving signal"): a small reporter that
// runs on the guest, asks the local proxy a question the proxy answers
// itself, and publishes what it saw where the provider can read it
// without a network path to the VM (a file the hypervisor reads through
// the QEMU guest agent, or a GCE guest attribute); and the parser that
// turns what it published into the contract's Serving.
//
// The report is a few "key=value" lines (Format, Parse), so the guest
// writes it with printf and the provider reads it without a schema.
package servingreport

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Where the report is published.
const (
	// ReportPath is the file the reporter writes on a guest whose
	// hypervisor reads it through the QEMU guest agent (libvirt, Proxmox).
	// /run is a tmpfs: a reboot starts from "not answered yet".
	ReportPath = "/run/egress-proxy/report"
	// GuestAttributeNamespace and GuestAttributeKey name the GCE guest
	// attribute the reporter writes (instance/guest-attributes/<ns>/<key>).
	GuestAttributeNamespace = "egress-proxy"
	GuestAttributeKey       = "report"
)

// ProbeHost is the host of the request the reporter sends the local proxy:
// a name under .invalid (RFC 6761), which the generated Squid refuses
// itself before any rule that resolves (squid.ServingProbe) and never
// logs; any other proxy fails to resolve it and answers with an error of
// its own. Either answer is an answer.
const ProbeHost = "serving.egress-proxy.invalid"

// CloudInit states the reporter publishes (cloud-init status's words; ""
// when the guest has no cloud-init).
const (
	CloudInitRunning = "running"
	CloudInitDone    = "done"
	CloudInitError   = "error"
)

// maxErrorLen bounds the cloud-init error line kept from a report: a
// condition's message is no place for a traceback.
const maxErrorLen = 200

// Report is what the guest's reporter last published.
type Report struct {
	// Serving: the proxy answered the reporter's last question.
	Serving bool
	// Checked is when the reporter last asked (the guest's clock).
	Checked time.Time
	// Answered is when the proxy last answered; zero if it never has since
	// the guest booted.
	Answered time.Time
	// Version is the proxy's version as the guest's Squid reports it
	// (squid -v), "" for another proxy.
	Version string
	// CloudInit is `cloud-init status` (running, done, error, disabled,
	// ...); CloudInitError its first error line when it is error.
	CloudInit      string
	CloudInitError string
	// EgressIP is the address the entry's echo last answered, through the
	// proxy (the guest's view; Parse checks it is an address);
	// EgressConfirmed when; EgressChecked when the echo was last asked;
	// EgressError why that ask failed, if it did.
	EgressIP        string
	EgressConfirmed time.Time
	EgressChecked   time.Time
	EgressError     string
	// HoldsGroupAddress is whether the guest holds its group's address
	// (a group member's reporter only): "yes", "no", or "" when the
	// reporter does not say.
	HoldsGroupAddress string
}

// Format writes r as the reporter does (for fakes and tests; the guest's
// reporter writes the same lines with printf).
func Format(r Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "v=1\nserving=%s\nchecked=%s\nanswered=%s\nversion=%s\ncloud_init=%s\ncloud_init_error=%s\n",
		yesNo(r.Serving), epoch(r.Checked), epoch(r.Answered), r.Version, r.CloudInit, oneLine(r.CloudInitError))
	if r.EgressIP != "" || !r.EgressConfirmed.IsZero() || !r.EgressChecked.IsZero() || r.EgressError != "" {
		// A report without an echo as a reporter of before it wrote it
		// (the fakes' captured answers are such reports).
		fmt.Fprintf(&b, "egress_ip=%s\negress_ip_confirmed=%s\negress_ip_checked=%s\negress_ip_error=%s\n",
			r.EgressIP, epoch(r.EgressConfirmed), epoch(r.EgressChecked), oneLine(r.EgressError))
	}
	if r.HoldsGroupAddress != "" {
		fmt.Fprintf(&b, "holds_group_address=%s\n", r.HoldsGroupAddress)
	}
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func epoch(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.Unix(), 10)
}

// Parse reads a report. Unknown keys are skipped (a newer reporter may
// add some); a report without serving= or of another version is an error.
func Parse(s string) (Report, error) {
	var r Report
	seen := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), "=")
		if !ok {
			continue
		}
		seen[k] = true
		var err error
		switch k {
		case "v":
			if v != "1" {
				return Report{}, fmt.Errorf("report version %q, want 1", v)
			}
		case "serving":
			switch v {
			case "yes":
				r.Serving = true
			case "no":
			default:
				return Report{}, fmt.Errorf("serving=%q, want yes or no", v)
			}
		case "checked":
			r.Checked, err = parseEpoch(v)
		case "answered":
			r.Answered, err = parseEpoch(v)
		case "version":
			r.Version = printable(v, 64)
		case "cloud_init":
			r.CloudInit = printable(v, 32)
		case "cloud_init_error":
			r.CloudInitError = printable(v, maxErrorLen)
		case "egress_ip":
			if v != "" {
				a, perr := netip.ParseAddr(v)
				if perr != nil || a.Zone() != "" {
					// Kept out of the report, said instead.
					r.EgressError = "the echo's answer " + strconv.Quote(printable(v, 48)) + " is not an address"
					continue
				}
				r.EgressIP = a.Unmap().String()
			}
		case "egress_ip_confirmed":
			r.EgressConfirmed, err = parseEpoch(v)
		case "egress_ip_checked":
			r.EgressChecked, err = parseEpoch(v)
		case "egress_ip_error":
			if v != "" {
				r.EgressError = printable(v, maxErrorLen)
			}
		case "holds_group_address":
			switch v {
			case "yes", "no", "":
				r.HoldsGroupAddress = v
			default:
				return Report{}, fmt.Errorf("holds_group_address=%q, want yes or no", v)
			}
		}
		if err != nil {
			return Report{}, fmt.Errorf("%s: %w", k, err)
		}
	}
	if !seen["serving"] {
		return Report{}, fmt.Errorf("no serving= line in %d bytes", len(s))
	}
	return r, nil
}

func parseEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, fmt.Errorf("%q is not seconds since the epoch", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

// printable keeps what a condition may show of a guest's text: printable
// ASCII, at most n bytes.
func printable(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return strings.TrimSpace(s)
}

func oneLine(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }

// StaleAfter is how old a report may be before the provider no longer
// believes it: the reporter writes every Interval, so a report this old
// means the reporter (or the guest) stopped. It is generous because it
// compares the guest's clock with the operator's.
const StaleAfter = 2 * time.Minute

// Signal is what a report says in the contract's terms at now: the proxy
// answers or not, a detail for the condition's message, when it last
// answered, and the cloud-init error line when cloud-init failed.
func (r Report) Signal(now time.Time) Signal {
	s := Signal{LastAnswered: r.Answered, Egress: r.egress()}
	if r.HoldsGroupAddress != "" && (r.Checked.IsZero() || now.Sub(r.Checked) <= StaleAfter) {
		// A stale report says nothing of now: its guest may be gone.
		held := r.HoldsGroupAddress == "yes"
		s.HoldsGroupAddress = &held
	}
	if r.CloudInit == CloudInitError {
		s.SetupError = orDefault(r.CloudInitError, "cloud-init status: error")
	}
	if !r.Checked.IsZero() && now.Sub(r.Checked) > StaleAfter {
		s.Serving = provider.ServingNotAnswering
		s.Detail = fmt.Sprintf("the guest's last report is from %s, %s ago: its reporter or the guest has stopped",
			r.Checked.Format(time.RFC3339), now.Sub(r.Checked).Round(time.Second))
		return s
	}
	if r.CloudInit == CloudInitRunning {
		// The guest is still being set up: what runs next (the generated
		// cloud-config's runcmd restarts Squid) may stop the proxy, so an
		// answer now is no promise yet, and a pause is no stop. It is
		// starting until cloud-init is done; seen on the libvirt guests,
		// Ready flapped during the restart without this.
		s.Serving, s.LastAnswered = provider.ServingNotAnswering, time.Time{}
		s.Detail = "not answering yet (cloud-init: running)"
		if r.Serving {
			s.Detail = "the proxy answers; waiting for cloud-init to finish"
		}
		return s
	}
	if r.Serving {
		s.Serving = provider.ServingAnswering
		return s
	}
	s.Serving = provider.ServingNotAnswering
	switch {
	case r.Answered.IsZero():
		s.Detail = "not answering yet"
	default:
		s.Detail = "it last answered at " + r.Answered.Format(time.RFC3339)
	}
	if r.CloudInit != "" {
		s.Detail += " (cloud-init: " + r.CloudInit + ")"
	}
	return s
}

// Signal is a report in the contract's terms (provider.Instance's fields
// of the same names).
type Signal struct {
	Serving      provider.Serving
	Detail       string
	LastAnswered time.Time
	SetupError   string
	// Egress is the echo's answer (zero when the reporter has no echo).
	Egress provider.Egress
	// HoldsGroupAddress is whether the guest holds its group's address;
	// nil when the report does not say, or is stale.
	HoldsGroupAddress *bool
}

// Apply sets inst's serving fields, and its egress address when the
// report has one, from s.
func (s Signal) Apply(inst *provider.Instance) {
	inst.Serving, inst.ServingDetail, inst.LastAnswered, inst.SetupError = s.Serving, s.Detail, s.LastAnswered, s.SetupError
	inst.HoldsGroupAddress = s.HoldsGroupAddress
	if s.Egress != (provider.Egress{}) {
		inst.Egress = s.Egress
	}
}

// egress is what the report says of the egress address: zero when the
// echo was never asked (no echo, or the proxy has not answered yet).
func (r Report) egress() provider.Egress {
	if r.EgressIP == "" && r.EgressError == "" {
		return provider.Egress{}
	}
	return provider.Egress{IP: r.EgressIP, Source: provider.EgressFromEcho, Confirmed: r.EgressConfirmed, Error: r.EgressError}
}

// Unread is the signal when the report could not be read: not answering,
// with why (the guest agent is not up yet, no report yet).
func Unread(why string) Signal {
	return Signal{Serving: provider.ServingNotAnswering, Detail: why}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
