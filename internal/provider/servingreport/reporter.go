package servingreport

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
)

// Interval is how often the guest's reporter asks the proxy.
const Interval = 10 * time.Second

// EchoInterval is how often it asks the entry's egress-IP echo, answered
// or not: an outside service, asked by every instance.
const EchoInterval = time.Minute

// Config is what a reporter is installed with.
type Config struct {
	// Port is the local proxy's port.
	Port int32
	// Publish is where the report goes.
	Publish Publish
	// Echo, when set, is the entry's egress-IP echo, asked through the
	// local proxy every EchoInterval (egress.Echo; the generated Squid
	// admits the reporter to it).
	Echo egress.Echo
	// GroupAddress, when valid, is the address the guest's group holds
	// through VRRP: the reporter says whether the guest holds it now
	// (holds_group_address), so the operator learns which member keeps
	// the group's address.
	GroupAddress netip.Addr
}

// echoRequestURL is the absolute URL the reporter asks the proxy for.
func echoRequestURL(e egress.Echo) string {
	if e.IsZero() {
		return ""
	}
	return "http://" + e.HostPort() + e.Path
}

// Publish is where the reporter publishes its report.
type Publish string

const (
	// PublishFile writes ReportPath, which the hypervisor reads through the
	// QEMU guest agent (libvirt, Proxmox).
	PublishFile Publish = "file"
	// PublishGuestAttribute PUTs the report to the GCE metadata server's
	// guest attributes (the instance needs enable-guest-attributes).
	PublishGuestAttribute Publish = "guest-attribute"
)

// Names of what the installer writes on the guest.
const (
	ReporterPath = "/usr/local/libexec/egress-proxy-serving"
	ServiceName  = "egress-proxy-serving.service"
	TimerName    = "egress-proxy-serving.timer"
	unitDir      = "/etc/systemd/system"
)

// reporterScript asks the proxy on 127.0.0.1:$1 for http://ProbeHost/ and
// publishes the report ($2: file or guest-attribute); with $3, an echo URL,
// it asks that through the proxy every EchoInterval too and publishes the
// address it answered. bash for /dev/tcp (Debian's and Ubuntu's base
// images have bash, awk, date and coreutils; no curl). Any HTTP status
// line is an answer: the generated Squid refuses the name itself, another
// proxy fails to resolve it. answered= and the egress_ip lines carry over
// from the last report, so "stopped answering" and the last confirmed
// address survive a run.
//
// EGRESS_PROXY_METADATA (host:port) and EGRESS_PROXY_REPORT override the
// metadata server and the report's file, for tests only.
const reporterScript = `#!/bin/bash
# egress-proxies-operator: publishes whether this VM's egress proxy answers
# (the operator's serving signal). Asks the local proxy for a name under
# .invalid, which it answers itself without sending anything anywhere; with
# an echo URL, asks it through the proxy once a minute for the address
# destinations see.
set -u
export LC_ALL=C
# A proxy that answers and closes before it read the whole question must
# not kill the reporter: a write then fails instead.
trap '' PIPE
port=${1:?usage: egress-proxy-serving PORT file|guest-attribute [ECHO-URL]}
publish=${2:?usage: egress-proxy-serving PORT file|guest-attribute [ECHO-URL]}
echo_url=${3:-}
report=${EGRESS_PROXY_REPORT:-@REPORT@}
metadata=${EGRESS_PROXY_METADATA:-169.254.169.254:80}

last() { sed -n "s/^$1=//p" "$report" 2>/dev/null | head -n 1; }
now=$(date +%s)
version=$(squid -v 2>/dev/null | sed -n '1s/^.*Version //p')
# cloud-init status is Python, seconds under emulation: asked while
# cloud-init runs, kept once it is final (until a reboot clears /run).
# Asked before the proxy, so that "done" was true when the proxy was
# asked: cloud-init's last step restarts Squid, and a proxy asked first,
# during that restart, would be reported down with cloud-init done.
ci=
ci_error=
ci_final="$(dirname "$report")/cloud-init-final"
if [ -s "$ci_final" ]; then
	{ IFS= read -r ci; IFS= read -r ci_error; } <"$ci_final"
elif command -v cloud-init >/dev/null 2>&1; then
	long=$(cloud-init status --long 2>/dev/null)
	ci=$(printf '%s\n' "$long" | awk '@STATUS_AWK@')
	if [ "$ci" = error ]; then
		ci_error=$(printf '%s\n' "$long" | awk '@ERROR_AWK@' | tr -cd '[:print:]' | cut -c1-@MAXERR@)
	fi
	case $ci in
	done | error | disabled)
		mkdir -p "$(dirname "$ci_final")"
		printf '%s\n%s\n' "$ci" "$ci_error" >"$ci_final"
		;;
	esac
fi

answered=$(last answered)
serving=no
if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
	printf 'GET http://@PROBE@/ HTTP/1.0\r\nHost: @PROBE@\r\n\r\n' >&3
	if IFS= read -r -t 5 status <&3 && [[ $status == HTTP/* ]]; then
		serving=yes
		answered=$now
	fi
	exec 3<&- 3>&-
fi 2>/dev/null

# The egress address, through the proxy: what destinations see.
egress_ip=$(last egress_ip)
egress_ip_confirmed=$(last egress_ip_confirmed)
egress_ip_checked=$(last egress_ip_checked)
egress_ip_error=$(last egress_ip_error)
if [ -z "$echo_url" ]; then
	egress_ip= egress_ip_confirmed= egress_ip_checked= egress_ip_error=
elif [ "$serving" = yes ] && { [ -z "$egress_ip_checked" ] || [ $((now - egress_ip_checked)) -ge @ECHO_EVERY@ ]; }; then
	egress_ip_checked=$now
	hostport=${echo_url#http://}
	hostport=${hostport%%/*}
	answer= estatus=
	if exec 5<>"/dev/tcp/127.0.0.1/$port"; then
		printf 'GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: egress-proxies-operator\r\nAccept: text/plain\r\n\r\n' "$echo_url" "$hostport" >&5
		if IFS= read -r -t 10 estatus <&5; then
			estatus=${estatus%$'\r'}
			while IFS= read -r -t 10 line <&5 && [ -n "${line%$'\r'}" ]; do :; done
			IFS= read -r -t 10 answer <&5
			answer=${answer%$'\r'}
			answer=${answer#"${answer%%[![:space:]]*}"}
			answer=${answer%"${answer##*[![:space:]]}"}
		fi
		exec 5<&- 5>&-
	fi 2>/dev/null
	if [[ $estatus == HTTP/*\ 200* ]] && [[ $answer =~ ^[0-9A-Fa-f:.]{2,45}$ ]]; then
		egress_ip=$answer egress_ip_confirmed=$now egress_ip_error=
	elif [ -z "$estatus" ]; then
		egress_ip_error="no answer from the proxy or the echo within 10s"
	elif [[ $estatus != HTTP/*\ 200* ]]; then
		egress_ip_error="the echo answered: $(printf '%s' "$estatus" | tr -cd '[:print:]' | cut -c1-80)"
	else
		egress_ip_error="the echo's answer is not an address: $(printf '%s' "$answer" | tr -cd '[:print:]' | cut -c1-48)"
	fi
fi

# A group member's: whether it holds the group's address now (keepalived
# puts it on the NIC while this member is the VRRP master).
holds=
if [ -n "${EGRESS_PROXY_GROUP_ADDRESS:-}" ]; then
	if ip -o addr show to "$EGRESS_PROXY_GROUP_ADDRESS" 2>/dev/null | grep -q .; then
		holds=yes
	else
		holds=no
	fi
fi

body=$(printf 'v=1\nserving=%s\nchecked=%s\nanswered=%s\nversion=%s\ncloud_init=%s\ncloud_init_error=%s\negress_ip=%s\negress_ip_confirmed=%s\negress_ip_checked=%s\negress_ip_error=%s\n' \
	"$serving" "$now" "$answered" "$version" "$ci" "$ci_error" "$egress_ip" "$egress_ip_confirmed" "$egress_ip_checked" "$egress_ip_error")
if [ -n "$holds" ]; then
	body="$body"$'\n'"holds_group_address=$holds"
fi

case $publish in
file)
	mkdir -p "$(dirname "$report")"
	printf '%s\n' "$body" >"$report.tmp" && mv -f "$report.tmp" "$report"
	;;
guest-attribute)
	# The guest attribute, and a copy for the next run's answered=.
	mkdir -p "$(dirname "$report")"
	printf '%s\n' "$body" >"$report.tmp" && mv -f "$report.tmp" "$report"
	exec 4<>"/dev/tcp/${metadata%:*}/${metadata##*:}" || exit 1
	printf 'PUT /computeMetadata/v1/instance/guest-attributes/@NAMESPACE@/@KEY@ HTTP/1.0\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\nContent-Length: %d\r\n\r\n%s\n' \
		"$((${#body} + 1))" "$body" >&4
	IFS= read -r -t 5 status <&4
	exec 4<&- 4>&-
	[[ ${status:-} == HTTP/*\ 200* ]] || { echo "guest attribute not written: ${status:-no answer}" >&2; exit 1; }
	;;
*)
	echo "unknown publish $publish" >&2
	exit 2
	;;
esac
`

// statusAWK prints cloud-init status's word from `cloud-init status
// --long`.
const statusAWK = `/^status:/ { sub(/^status:[ \t]*/, ""); print; exit }`

// errorAWK prints the first error line of `cloud-init status --long`:
// the first item under "errors:" (cloud-init 23.4 and later), else what
// follows "detail:" (22.4: the errors, one per line, on the lines after
// it).
const errorAWK = `/^errors:/ { e = 1; next }
e && NF { sub(/^[ \t-]+/, ""); print; exit }
/^detail:/ { d = $0; sub(/^detail:[ \t]*/, "", d); if (d == "") { nd = 1 } else { first = d }; next }
nd && NF && first == "" { first = $0; nd = 0 }
END { if (!e && first != "") print first }`

// Reporter is the reporter's script, as the installer writes it.
func Reporter() string {
	return strings.NewReplacer(
		"@REPORT@", ReportPath,
		"@PROBE@", ProbeHost,
		"@STATUS_AWK@", statusAWK,
		"@ERROR_AWK@", errorAWK,
		"@MAXERR@", fmt.Sprint(maxErrorLen),
		"@NAMESPACE@", GuestAttributeNamespace,
		"@KEY@", GuestAttributeKey,
		"@ECHO_EVERY@", fmt.Sprint(int(EchoInterval/time.Second)),
	).Replace(reporterScript)
}

// Service is the reporter's unit: one run, sandboxed (it reads cloud-init's
// status, connects to loopback and, on GCE, the metadata server, and writes
// only /run/egress-proxy).
func Service(c Config) string { return service(ReporterPath, c) }

func service(reporter string, c Config) string {
	args := fmt.Sprintf("%d %s", c.Port, c.Publish)
	if u := echoRequestURL(c.Echo); u != "" {
		// egress.ParseEcho admitted no character systemd or the shell
		// would read.
		args += " " + u
	}
	env, families := "", "AF_INET AF_INET6 AF_UNIX"
	if c.GroupAddress.IsValid() {
		// `ip addr` reads the NIC's addresses over netlink.
		env = "Environment=EGRESS_PROXY_GROUP_ADDRESS=" + c.GroupAddress.String() + "\n"
		families += " AF_NETLINK"
	}
	return fmt.Sprintf(`[Unit]
Description=Publish whether this VM's egress proxy answers (egress-proxies-operator)
Documentation=https://github.com/egress-proxies-operator/egress-proxies-operator/blob/main/docs/provider-contract.md

[Service]
Type=oneshot
ExecStart=%s %s
%sTimeoutStartSec=40
RuntimeDirectory=egress-proxy
RuntimeDirectoryPreserve=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
NoNewPrivileges=yes
CapabilityBoundingSet=
RestrictAddressFamilies=%s
LogLevelMax=notice
`, reporter, args, env, families)
}

// Timer runs the reporter every Interval from boot.
func Timer() string {
	return fmt.Sprintf(`[Unit]
Description=Publish whether this VM's egress proxy answers, every %[1]s (egress-proxies-operator)

[Timer]
OnActiveSec=0
OnUnitActiveSec=%[1]s
AccuracySec=1s

[Install]
WantedBy=timers.target
`, fmt.Sprintf("%ds", int(Interval/time.Second)))
}

// Installer is a POSIX sh fragment, run as root once per instance (a
// NoCloud vendor-data script, a GCE startup script), that writes the
// reporter and its units and starts the timer. It needs systemd; without
// it, it says so and exits 0, so the rest of a vendor-data still runs (the
// provider then reads no report, and says so in the condition).
func Installer(c Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# egress-proxies-operator: the serving reporter (%s every %s).\n", c.Publish, Interval)
	// EGRESS_PROXY_ROOT is for tests only: where / is.
	b.WriteString("root=${EGRESS_PROXY_ROOT:-}\n")
	b.WriteString("if command -v systemctl >/dev/null 2>&1; then\n")
	for _, f := range []struct{ path, mode, content string }{
		{ReporterPath, "0755", Reporter()},
		{unitDir + "/" + ServiceName, "0644", Service(c)},
		{unitDir + "/" + TimerName, "0644", Timer()},
	} {
		fmt.Fprintf(&b, "\tmkdir -p \"$root%s\"\n", f.path[:strings.LastIndex(f.path, "/")])
		fmt.Fprintf(&b, "\tcat >\"$root%s\" <<'EGRESS_PROXY_EOF'\n%sEGRESS_PROXY_EOF\n", f.path, f.content)
		fmt.Fprintf(&b, "\tchmod %s \"$root%s\"\n", f.mode, f.path)
	}
	// --no-block: run from cloud-init's early stages, a start that waited
	// for the timer (which needs sysinit.target) would wait for itself.
	// A failure is said, never returned: in bootcmd it would turn
	// cloud-init's status to error for a reporter's sake.
	fmt.Fprintf(&b, "\tsystemctl daemon-reload &&\n\t\tsystemctl enable %[1]s &&\n\t\tsystemctl start --no-block %[1]s ||\n\t\techo 'egress-proxies-operator: starting the serving reporter failed' >&2\n", TimerName)
	b.WriteString("else\n\techo 'egress-proxies-operator: no systemd, no serving reporter' >&2\nfi\n")
	return b.String()
}
