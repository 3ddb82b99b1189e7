// Package vrrp renders what holds a group's virtual address on one member
// at a time on the on-prem backends (kvm, kvm2, proxmox): keepalived's
// configuration, and the check that takes the address away from a member
// whose Squid stops answering, not only from one that dies.
//
// The choices, made once here:
//   - unicast adverts to the other members' own addresses: many bridges
//     (and every cloud-like L2) drop multicast, and the members' addresses
//     are pool addresses that outlive their instances (the egress-identity
//     design), so a replaced member keeps its place in its peers' lists and
//     nobody needs telling; a change of members is told to the others in
//     place (PeersPath, ApplyPeers);
//   - every member starts BACKUP with nopreempt: the first to come up takes
//     the address and keeps it while it serves; a member that comes back
//     does not take it back (a move is a gap for clients, so there is one
//     per failure, not two);
//   - the check is the serving reporter's own probe (a request for a name
//     under .invalid, which the generated Squid answers itself): a member
//     whose Squid does not answer goes to FAULT and gives the address up;
//   - adverts every second: a holder that dies is replaced after VRRP's
//     Master_Down_Interval (3 adverts and a skew under 0.9 s: about 3 s
//     after its last advert) by the survivor of highest priority, whose
//     skew is shortest by PriorityStep's margin; one whose Squid stops
//     after two failed checks (about 2 s), then at once.
//
// Nothing here authenticates adverts: VRRP's only authentication (a
// clear-text password, removed in version 3) proves nothing. The members
// sit on the entry's bridge, which is the trust boundary (docs/groups.md).
package vrrp

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// Paths on the guest.
const (
	ConfigPath = "/etc/keepalived/keepalived.conf"
	// CheckPath is the serving check keepalived runs every second.
	CheckPath = "/usr/local/libexec/egress-proxy-vrrp-check"
	// SysctlPath lets Squid bind the virtual address on a member that does
	// not hold it (tcp_outgoing_address), so a member that takes the
	// address over serves at once, without a restart.
	SysctlPath = "/etc/sysctl.d/60-egress-proxy-vrrp.conf"
	// PeersPath is the member's unicast block, which ConfigPath includes:
	// the one part a change of the group's members changes, rewritten in
	// place through the guest agent (ApplyPeers) instead of replacing
	// the member.
	PeersPath = "/etc/keepalived/egress-proxy-peers.conf"
	// Service is the distributions' keepalived unit.
	Service = "keepalived.service"
)

// AdvertInterval is how often the holder says so, in seconds.
const AdvertInterval = 1

// Member is one member's place in its group's VRRP instance.
type Member struct {
	// Interface is the NIC that carries the member's and the virtual
	// address.
	Interface string
	// Self is the member's own address on Interface: adverts leave from it.
	Self netip.Addr
	// Peers are the other members' addresses; adverts go to each. None:
	// a group of one.
	Peers []netip.Addr
	// Virtual is the group's address with the pool's prefix length.
	Virtual netip.Prefix
	// RouterID is VRRP's virtual router ID, one per group on a segment
	// (RouterID derives it from the group).
	RouterID uint8
	// Priority decides between members that come up together: the
	// highest serving one takes the address (Priority derives it).
	Priority uint8
	// Port is the local Squid's port, which the check asks.
	Port int32
}

// RouterID derives a group's virtual router ID (1-255) from its identity
// (the group's UID): stable across the group's life and its members'
// replacements. Two groups on one bridge may still draw the same ID (one
// in 255 per pair); keepalived then logs adverts for the other's address
// and each keeps its own, because adverts carry the addresses and a
// member drops one for addresses it does not hold (docs/groups.md).
func RouterID(group string) uint8 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	return uint8(h.Sum32()%255) + 1
}

// PriorityStep separates adjacent members' priorities. When the holder
// dies every BACKUP waits 3 adverts plus a skew of (256-priority)/256 s;
// one step apart the skews differ by 4 ms, less than a loaded host's
// scheduling jitter, so two survivors could both take the address and the
// higher then take it back: two moves for one failure. Thirty apart they
// differ by 117 ms: the preferred survivor's first advert reaches the
// others before their timers run out. Eight members (ProxyGroup's
// maximum) span 254 to 44.
const PriorityStep = 30

// maxIndexed is how many members get a spaced priority.
const maxIndexed = (254 - 1) / PriorityStep

// Priority is member index's priority: the lowest index is preferred
// when members come up together or survive a holder together (254, 224,
// ...; never 255, the address owner's, which would make one member always
// take it back).
func Priority(index int) uint8 {
	if index < 0 || index > maxIndexed {
		return 1
	}
	return uint8(254 - PriorityStep*index)
}

// Validate says what makes m unusable, naming the field.
func (m Member) Validate() error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if m.Interface == "" || strings.ContainsAny(m.Interface, " \t\n{}\"'#!/") {
		add("interface %q is not an interface name", m.Interface)
	}
	if !m.Self.IsValid() {
		add("self: no address")
	}
	if !m.Virtual.IsValid() {
		add("virtual: no address")
	} else if m.Self.IsValid() && m.Virtual.Addr().Is4() != m.Self.Is4() {
		add("virtual %s and self %s are of different families", m.Virtual.Addr(), m.Self)
	} else if m.Virtual.Addr() == m.Self {
		add("virtual %s is the member's own address", m.Virtual.Addr())
	}
	errs = append(errs, peersErrors(m.Self, m.Virtual.Addr(), m.Peers)...)
	if m.RouterID == 0 {
		add("routerID: 0 is not a VRRP router ID (1-255)")
	}
	if m.Priority == 0 || m.Priority == 255 {
		add("priority: %d is reserved (1-254)", m.Priority)
	}
	if m.Port < 1 || m.Port > 65535 {
		add("port %d is outside 1-65535", m.Port)
	}
	if len(errs) > 0 {
		return fmt.Errorf("vrrp: %s", strings.Join(errs, "; "))
	}
	return nil
}

// peersErrors says what is wrong with peers for a member at self in a
// group whose address is virtual (either may be invalid: not checked).
func peersErrors(self, virtual netip.Addr, peers []netip.Addr) []string {
	var errs []string
	for i, p := range peers {
		switch {
		case !p.IsValid():
			errs = append(errs, fmt.Sprintf("peers[%d]: no address", i))
		case p == self:
			errs = append(errs, fmt.Sprintf("peers[%d]: %s is the member's own address", i, p))
		case virtual.IsValid() && p == virtual:
			errs = append(errs, fmt.Sprintf("peers[%d]: %s is the virtual address", i, p))
		case self.IsValid() && p.Is4() != self.Is4():
			errs = append(errs, fmt.Sprintf("peers[%d]: %s is not of self's family", i, p))
		case slices.Contains(peers[:i], p):
			errs = append(errs, fmt.Sprintf("peers[%d]: %s is listed twice", i, p))
		}
	}
	return errs
}

// Config renders keepalived.conf for m (checked by Validate first). Its
// unicast block is PeersPath's, included (Peers renders it).
func Config(generator string, m Member) (string, error) {
	if err := m.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Generated by %s; do not edit.", generator)
	w("# Holds the group's address %s on one member at a time (VRRP).", m.Virtual.Addr())
	w("global_defs {")
	// The check runs unprivileged; keepalived refuses a script that
	// user could change.
	w("    script_user nobody")
	w("    enable_script_security")
	w("    vrrp_garp_master_refresh 60")
	w("}")
	w("vrrp_script egress_proxy_serving {")
	w("    script \"%s %d\"", CheckPath, m.Port)
	w("    interval 1")
	w("    timeout 2")
	w("    fall 2")
	w("    rise 2")
	w("}")
	w("vrrp_instance egress_proxy {")
	w("    state BACKUP")
	w("    nopreempt")
	if m.Self.Is6() {
		w("    version 3")
	}
	w("    interface %s", m.Interface)
	w("    virtual_router_id %d", m.RouterID)
	w("    priority %d", m.Priority)
	w("    advert_int %d", AdvertInterval)
	// keepalived reads an include in place, inside a block too.
	w("    include %s", PeersPath)
	w("    virtual_ipaddress {")
	w("        %s dev %s", m.Virtual, m.Interface)
	w("    }")
	w("    track_script {")
	w("        egress_proxy_serving")
	w("    }")
	w("}")
	return b.String(), nil
}

// Peers is PeersPath's content for a member at self advertising to
// peers, checked as Validate checks a Member's. No peers: no unicast
// block, since keepalived reverts to multicast when one lists no peer; a
// group of one has nobody to tell, and says so by multicast on its own
// bridge (docs/groups.md).
func Peers(self netip.Addr, peers []netip.Addr) (string, error) {
	errs := peersErrors(self, netip.Addr{}, peers)
	if !self.IsValid() {
		errs = append([]string{"self: no address"}, errs...)
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("vrrp: %s", strings.Join(errs, "; "))
	}
	var b strings.Builder
	b.WriteString("# The group's other members, written by egress-proxies-operator; rewritten in place when they change.\n")
	if len(peers) > 0 {
		fmt.Fprintf(&b, "unicast_src_ip %s\nunicast_peer {\n", self)
		for _, p := range peers {
			fmt.Fprintf(&b, "    %s\n", p)
		}
		b.WriteString("}\n")
	}
	return b.String(), nil
}

// ApplyPeers is the command a provider runs on a member through the
// guest agent with Peers' content as its standard input: the file is
// replaced whole (a reload never reads half of it) and a running
// keepalived reloads it, keeping its state, so the holder keeps the
// address; one not running yet reads it when it starts.
func ApplyPeers() []string {
	return []string{"/bin/sh", "-c", "umask 022 && cat > " + PeersPath + ".new && mv -f " + PeersPath + ".new " + PeersPath +
		" && systemctl try-reload-or-restart " + Service}
}

// Sysctl is SysctlPath's content: non-local binds for the virtual
// address's family, for every boot after the first.
func Sysctl(virtual netip.Addr) string {
	return nonlocalBind(virtual) + " = 1\n"
}

// SysctlCommand sets Sysctl's setting now: on the first boot, before the
// image's Squid and keepalived start (cloud-init's bootcmd), since the
// file is written later in that boot.
func SysctlCommand(virtual netip.Addr) string {
	return "sysctl -w " + nonlocalBind(virtual) + "=1"
}

func nonlocalBind(virtual netip.Addr) string {
	if virtual.Is6() {
		return "net.ipv6.ip_nonlocal_bind"
	}
	return "net.ipv4.ip_nonlocal_bind"
}

// Check is CheckPath's content: exit 0 when the local Squid on port $1
// answers the serving reporter's probe within 2 s (any HTTP status line:
// the generated Squid refuses the .invalid name itself). bash for
// /dev/tcp, as the reporter.
func Check() string {
	return strings.ReplaceAll(`#!/bin/bash
# egress-proxies-operator: keepalived's check that this member's Squid
# answers; a member that fails it gives the group's address up.
port=${1:?usage: egress-proxy-vrrp-check PORT}
exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null || exit 1
printf 'GET http://@PROBE@/ HTTP/1.0\r\nHost: @PROBE@\r\n\r\n' >&3
IFS= read -r -t 2 status <&3 || exit 1
[[ $status == HTTP/* ]]
`, "@PROBE@", servingreport.ProbeHost)
}
