package fakepve

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
)

// AgentMode is what the guest agent of a running VM does.
type AgentMode int

const (
	// AgentRunning answers with its interfaces.
	AgentRunning AgentMode = iota
	// AgentNotRunning does not answer its ping: "QEMU guest agent is not
	// running" (not installed, not started, crashed).
	AgentNotRunning
	// AgentQMPTimeout answers the ping but not the command: "qmp command
	// 'guest-network-get-interfaces' failed - got timeout".
	AgentQMPTimeout
)

// Agent is a VM's guest agent. Whether an agent is configured at all is
// the config's "agent" key ("No QEMU guest agent configured" without it).
type Agent struct {
	Mode AgentMode
	// Interfaces answered; nil is lo and eth0 with net0's MAC, a
	// 192.0.2.0/24 (TEST-NET-1) address (the static one of the seed's
	// network-config when it has one for eth0) and its link-local IPv6.
	Interfaces []Interface
	// BootSteps: after a start the agent answers "not running" until this
	// many Advance steps or agent calls have passed (the BootSteps-th call
	// is answered); 0 takes SetAgentBootSteps' value.
	BootSteps int
	// Exec, when set, is how every command run through agent/exec ends
	// instead of the model, with no effect on the guest (a command that
	// fails there: a read-only filesystem, keepalived not installed).
	Exec *ExecResult
}

// Interface is one entry of guest-network-get-interfaces.
type Interface struct {
	Name      string
	MAC       string
	Addresses []IPAddress
	Stats     *InterfaceStats
}

// IPAddress is an interface address; Type is "ipv4" or "ipv6".
type IPAddress struct {
	Address string
	Type    string
	Prefix  int
}

// InterfaceStats are the interface counters the agent reports.
type InterfaceStats struct {
	RxBytes, RxDropped, RxErrs, RxPackets int64
	TxBytes, TxDropped, TxErrs, TxPackets int64
}

// SetAgent sets what VM vmid's guest agent does.
func (s *Server) SetAgent(vmid int, a Agent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vms[vmid]; v != nil {
		v.agent = a
		if a.BootSteps > 0 && v.running {
			v.agentWait = a.BootSteps
		}
	}
}

// SetAgentBootSteps sets how long every agent takes to answer after its VM
// starts (see Agent.BootSteps). Default 0: at once.
func (s *Server) SetAgentBootSteps(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.knobs.agentBoot = n
}

func (s *Server) defaultInterfaces(v *vm) []Interface {
	mac := strings.ToLower(macOf(v.conf, "net0"))
	if mac == "" {
		mac = "bc:24:11:00:00:01"
	}
	addr := IPAddress{fmt.Sprintf("192.0.2.%d", 2+v.vmid%250), "ipv4", 24}
	if v.static != nil {
		addr = *v.static
	}
	return []Interface{
		{Name: "lo", MAC: "00:00:00:00:00:00", Addresses: []IPAddress{
			{"127.0.0.1", "ipv4", 8}, {"::1", "ipv6", 128}}},
		{Name: "eth0", MAC: mac, Addresses: []IPAddress{addr, {linkLocal(mac), "ipv6", 64}}},
	}
}

// seedStaticAddress is what the guest's cloud-init does with the seed on
// its CD-ROM (ide2, a volume of an ISO storage) when it boots: a
// network-config there that matches eth0 (net0's MAC, or a name glob)
// gives eth0 its static address; otherwise (no seed, no network-config,
// no match, one it cannot read) the guest takes DHCP's, nil.
func (s *Server) seedStaticAddress(v *vm) *IPAddress {
	ide2 := v.conf.val("ide2")
	storage, rest, ok := strings.Cut(ide2, ":")
	if !ok {
		return nil
	}
	volname, _, _ := strings.Cut(rest, ",")
	st := s.store(v.node, storage)
	if st == nil || st.vols[volname] == nil {
		return nil
	}
	netcfg, found, err := nocloud.ReadFile(st.vols[volname].Data, nocloud.FileNetworkConfig)
	if err != nil || !found {
		return nil
	}
	static, match, err := nocloud.ParseNetworkConfig([]byte(netcfg.Reveal()))
	if err != nil || !match.Matches("eth0", strings.ToLower(macOf(v.conf, "net0"))) {
		return nil
	}
	typ := "ipv4"
	if static.Address.Addr().Is6() {
		typ = "ipv6"
	}
	return &IPAddress{Address: static.Address.Addr().String(), Type: typ, Prefix: static.Address.Bits()}
}

// linkLocal is the EUI-64 link-local address of a MAC.
func linkLocal(mac string) string {
	var b [6]byte
	for i, p := range strings.Split(mac, ":") {
		if i < 6 {
			n, _ := strconv.ParseUint(p, 16, 8)
			b[i] = byte(n)
		}
	}
	b[0] ^= 2
	return fmt.Sprintf("fe80::%x:%x:%x:%x", uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|0xff,
		uint16(0xfe)<<8|uint16(b[3]), uint16(b[4])<<8|uint16(b[5]))
}

// agentCommand is what every agent/* endpoint does before its command
// (cmd, the qga command it sends): the VM's config, then
// assert_agent_available, then the command's answer or its timeout.
func (s *Server) agentCommand(c *call, cmd string) (*vm, *Error) {
	v, e := s.vmOn(c)
	if e != nil {
		return nil, e
	}
	if e := s.agentReady(v, cmd); e != nil {
		return nil, e
	}
	return v, nil
}

// agentReady is agent_cmd once the config is loaded: assert_agent_available,
// then the command's answer or its timeout (for endpoints that check their
// parameters between the two, as exec does).
func (s *Server) agentReady(v *vm, cmd string) *Error {
	if e := s.assertAgentAvailable(v); e != nil {
		return e
	}
	if v.agent.Mode == AgentQMPTimeout {
		return QMPTimeout(cmd)
	}
	return nil
}

// assertAgentAvailable is qemu-server's assert_agent_available: an agent
// key in the config, the VM running, the agent answering its ping (a
// booting agent counts its calls down here).
func (s *Server) assertAgentAvailable(v *vm) *Error {
	if _, ok := v.conf.get("agent"); !ok {
		return AgentNotConfigured()
	}
	if !v.running {
		return AgentVMNotRunning(v.vmid)
	}
	if v.agentWait > 0 {
		v.agentWait--
		if v.agentWait > 0 {
			return GuestAgentNotRunning()
		}
	}
	if v.agent.Mode == AgentNotRunning {
		return GuestAgentNotRunning()
	}
	return nil
}

// agentNetwork is GET .../agent/network-get-interfaces: the VM's config,
// then assert_agent_available (configured, VM running, agent answering),
// then the command; the answer is {"result": [...]}.
func (s *Server) agentNetwork(c *call) (any, *Error) {
	v, e := s.agentCommand(c, "guest-network-get-interfaces")
	if e != nil {
		return nil, e
	}
	ifs := v.agent.Interfaces
	if ifs == nil {
		ifs = s.defaultInterfaces(v)
	}
	var out []any
	for _, i := range ifs {
		var addrs []any
		for _, a := range i.Addresses {
			addrs = append(addrs, obj{{"ip-address", a.Address}, {"ip-address-type", a.Type}, {"prefix", a.Prefix}})
		}
		st := InterfaceStats{}
		if i.Stats != nil {
			st = *i.Stats
		}
		o := obj{{"name", i.Name}, {"hardware-address", i.MAC}}
		if addrs != nil {
			o = append(o, field{"ip-addresses", addrs})
		}
		o = append(o, field{"statistics", obj{{"rx-bytes", st.RxBytes}, {"rx-dropped", st.RxDropped},
			{"rx-errs", st.RxErrs}, {"rx-packets", st.RxPackets}, {"tx-bytes", st.TxBytes},
			{"tx-dropped", st.TxDropped}, {"tx-errs", st.TxErrs}, {"tx-packets", st.TxPackets}}})
		out = append(out, o)
	}
	if out == nil {
		out = []any{}
	}
	return obj{{"result", out}}, nil
}
