package squid

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/clientauth"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/nocloud"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/vrrp"
)

// Family is a distribution family of VM images: what the generated
// cloud-config installs and how it starts Squid depend on it.
type Family string

const (
	// FamilyDebian is Debian and Ubuntu: package squid, squid.service,
	// the user proxy. The default.
	FamilyDebian Family = "debian"
	// FamilyRHEL is RHEL, CentOS Stream, Rocky, AlmaLinux and Fedora:
	// package squid, squid.service, the user squid, and SELinux, which lets
	// Squid bind only ports labelled squid_port_t.
	FamilyRHEL Family = "rhel"
)

// families are the supported families. SUSE and Alpine are
// not among them: their Squid is packaged as squid too, but Alpine starts
// services with OpenRC, not systemd, and neither has been checked; a Proxy
// on such an image brings its own cloud-init.
var families = []Family{FamilyDebian, FamilyRHEL}

// ParseFamily reads a family from a provider's image catalogue; empty is
// FamilyDebian.
func ParseFamily(s string) (Family, error) {
	if s == "" {
		return FamilyDebian, nil
	}
	for _, f := range families {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("distribution family %q is not supported: use one of %s, or give the Proxy its own cloudInit", s, familyList())
}

func familyList() string {
	s := make([]string, len(families))
	for i, f := range families {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// Where the distributions' squid packages read their config. Debian's and
// RHEL's agree on every path.
const (
	vmConfPath    = "/etc/squid/squid.conf"
	vmPidFile     = "/run/squid.pid" // squid.service's PIDFile on both
	vmCoredumpDir = "/var/spool/squid"
	vmLogDir      = "/var/log/squid" // made by the package, owned by its user
	vmService     = "squid.service"
	// vmPasswordFile holds a Proxy's clientAuth users on the VM.
	vmPasswordFile = "/etc/squid/htpasswd"
)

// squidGroup is the group the family's Squid (and its auth helper) runs
// as, which must read the password file.
var squidGroup = map[Family]string{FamilyDebian: "proxy", FamilyRHEL: "squid"}

// selinuxSquidPorts are the ports RHEL's SELinux policy labels squid_port_t;
// Squid on any other port must have it labelled first.
var selinuxSquidPorts = []int32{3128, 3401, 4827}

// CloudConfigParams are the inputs of a generated cloud-config: the
// request's port and admitted ranges, the entry's destination policy and
// the image's family.
type CloudConfigParams struct {
	// Generator names who generated it, e.g. "egress-proxies-operator (gcp
	// provider)".
	Generator string
	Port      int32
	// Clients are the admitted ranges, already parsed; empty admits the
	// VM's own loopback only.
	Clients []netip.Prefix
	// Destinations is the entry's policy; nil is egress.Default().
	Destinations *egress.Policy
	// Family is the image's distribution family; empty is FamilyDebian.
	Family Family
	// ClientAuth is the htpasswd file of the Proxy's clientAuth, already
	// checked (clientauth.Parse); empty: no authentication.
	ClientAuth provider.Sensitive
	// Reporter, when set, installs the serving reporter publishing there
	// in bootcmd, before any package is installed (servingreport); empty:
	// the provider installs it otherwise (a GCE startup script).
	Reporter servingreport.Publish
	// VRRP, when set, makes the VM a group member holding the group's
	// address in turn (keepalived, checked by vrrp.Member.Validate), and
	// Squid egress from that address whichever member holds it.
	VRRP *vrrp.Member
}

// vmParams is the VM variant of the generator's Params: the VM listens on
// every address, its distro's squid.service starts Squid as root, which
// drops to the package's user, and logs go where the distro keeps them.
func vmParams(in CloudConfigParams) Params {
	var auth *Auth
	if in.ClientAuth.Len() > 0 {
		auth = &Auth{PasswordFile: vmPasswordFile}
	}
	return Params{
		Auth:         auth,
		Generator:    orDefault(in.Generator, "egress-proxies-operator"),
		Port:         in.Port,
		Clients:      in.Clients,
		Destinations: in.Destinations,
		PidFile:      vmPidFile,
		CoredumpDir:  vmCoredumpDir,
		// The journal (syslog, which journald takes with the unit's name):
		// journalctl -u squid -o cat shows the JSON lines.
		AccessLog:    "syslog:daemon.info",
		CacheLog:     vmLogDir + "/cache.log",
		ServingProbe: true,
	}
}

// vrrpFiles are the files a group member's keepalived needs: its
// configuration and peers, the serving check it runs and the sysctl that lets Squid
// bind the group's address before it holds it.
func vrrpFiles(generator string, m vrrp.Member) ([]cloudFile, error) {
	conf, err := vrrp.Config(generator, m)
	if err != nil {
		return nil, err
	}
	peers, err := vrrp.Peers(m.Self, m.Peers)
	if err != nil {
		return nil, err
	}
	return []cloudFile{
		{vrrp.ConfigPath, "0644", conf},
		{vrrp.PeersPath, "0644", peers},
		{vrrp.CheckPath, "0755", vrrp.Check()},
		{vrrp.SysctlPath, "0644", vrrp.Sysctl(m.Virtual.Addr())},
	}, nil
}

// cloudFile is one write_files entry, owned by root.
type cloudFile struct {
	path, mode, content string
}

// CloudConfig builds the #cloud-config a VM gets when its Proxy brings no
// cloud-init. It installs the family's Squid package, writes the generated
// squid.conf and enables and restarts the distro's squid service; it adds
// no user, key, repository or other service.
//
// Order matters, and cloud-init's module order gives it: write_files runs
// in the init stage, before package installation (final stage), so the
// package finds our squid.conf in place. Debian's package keeps it (cloud-
// init runs apt-get with --force-confold) and starts Squid with it; RHEL's
// keeps it too (a %config(noreplace) file: the package's copy becomes
// squid.conf.rpmnew) and starts nothing. runcmd's commands run after the
// packages (scripts-user, final stage), so the restart leaves Squid
// running with our config on either family.
//
// package_update is on, package_upgrade off: cloud images often ship
// without package lists, so squid could not be found without an update;
// upgrading the whole image at first boot would be slow and may need a
// reboot, and keeping images current is the image catalogue's job.
//
// With ClientAuth the result holds the users' bcrypt hashes, in a file only
// Squid's group may read on the VM; what a provider passes on is
// UserData's Sensitive either way, never logged.
func CloudConfig(in CloudConfigParams) (string, error) {
	family, err := ParseFamily(string(in.Family))
	if err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "%w", err)
	}
	if in.Port < 1 || in.Port > 65535 {
		return "", provider.Errorf(provider.ErrPermanent, "port %d is outside 1-65535", in.Port)
	}
	sp := vmParams(in)
	packages := []string{"squid"}
	var bootcmd, runcmd []string
	var files []cloudFile
	if in.VRRP != nil {
		if files, err = vrrpFiles(sp.Generator, *in.VRRP); err != nil {
			return "", provider.Errorf(provider.ErrPermanent, "%w", err)
		}
		sp.OutgoingAddress = in.VRRP.Virtual.Addr()
		packages = append(packages, "keepalived")
		// Before Squid starts: its first connection may leave from the
		// group's address while another member holds it. An image with
		// Squid and keepalived installed starts both in the boot that runs
		// cloud-init, after bootcmd (cloud-init.service comes before
		// network-online.target, which both units wait for) and long
		// before runcmd.
		bootcmd = append(bootcmd, vrrp.SysctlCommand(in.VRRP.Virtual.Addr()))
	}
	if family == FamilyRHEL && !containsPort(selinuxSquidPorts, in.Port) {
		// RHEL's documented way: label the port for Squid (-a adds, -m
		// relabels a port the policy already gives another type).
		packages = append(packages, "policycoreutils-python-utils")
		runcmd = append(runcmd, fmt.Sprintf("semanage port -a -t squid_port_t -p tcp %[1]d || semanage port -m -t squid_port_t -p tcp %[1]d", in.Port))
	}
	if in.ClientAuth.Len() > 0 {
		// write_files runs before the package exists, so before its group
		// does: the file is written root-only, then handed to Squid's group.
		runcmd = append(runcmd, fmt.Sprintf("chgrp %s %s", squidGroup[family], vmPasswordFile),
			"chmod 0640 "+vmPasswordFile)
	}
	runcmd = append(runcmd, enableUnit(vmService), "systemctl restart "+vmService)
	if in.VRRP != nil {
		// After Squid: keepalived's check asks it, and a member takes the
		// address only once it answers.
		runcmd = append(runcmd, enableUnit(vrrp.Service), "systemctl restart "+vrrp.Service)
	}

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("#cloud-config")
	w("# Generated by %s; do not edit.", sp.Generator)
	w("# Installs Squid as this VM's egress proxy on port %d (%s family).", in.Port, family)
	if len(bootcmd) > 0 || in.Reporter != "" {
		w("bootcmd:")
	}
	for _, c := range bootcmd {
		w("  - %s", yamlString(c))
	}
	if in.Reporter != "" {
		// bootcmd is the first module to run (the init stage, every boot),
		// before write_files and the packages, so the guest reports
		// "cloud-init: running" while Squid is installed. The timer is
		// started without waiting: its unit needs sysinit.target, which
		// waits for this stage.
		w("  - |")
		for _, l := range strings.Split(strings.TrimSuffix(servingreport.Installer(reporterConfig(in)), "\n"), "\n") {
			if l == "" {
				w("")
			} else {
				w("    %s", l)
			}
		}
	}
	w("package_update: true")
	w("package_upgrade: false")
	w("packages:")
	for _, p := range packages {
		w("  - %s", p)
	}
	w("write_files:")
	written := []cloudFile{{vmConfPath, "0644", Config(sp)}}
	if in.ClientAuth.Len() > 0 {
		written = append(written, cloudFile{vmPasswordFile, "0600", in.ClientAuth.Reveal()})
	}
	for _, f := range append(written, files...) {
		w("  - path: %s", f.path)
		w("    owner: root:root")
		w("    permissions: '%s'", f.mode)
		w("    content: |")
		// A literal block keeps the file as it is, its last newline
		// included; an empty line needs no indent.
		for _, l := range strings.Split(strings.TrimSuffix(f.content, "\n"), "\n") {
			if l == "" {
				w("")
			} else {
				w("      %s", l)
			}
		}
	}
	w("runcmd:")
	for _, c := range runcmd {
		w("  - %s", yamlString(c))
	}
	return b.String(), nil
}

// enableUnit is the runcmd line that enables unit at boot unless it is
// already: Debian's packages enable their services themselves, and
// `systemctl enable` of a unit with a SysV script runs update-rc.d, about
// 22 s per unit on an emulated guest (measured on the libvirt test host's
// Debian 12 guests, 2026-12-04); RHEL's packages enable nothing, so
// there it enables.
func enableUnit(unit string) string {
	return "systemctl is-enabled --quiet " + unit + " || systemctl enable " + unit
}

// yamlString quotes a runcmd line when YAML would read it as something
// other than the plain string (here: a line holding "||" or ": ").
func yamlString(s string) string {
	if strings.ContainsAny(s, ":#|&*!%@`'\"{}[],>?") {
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	return s
}

func containsPort(ports []int32, p int32) bool {
	for _, q := range ports {
		if q == p {
			return true
		}
	}
	return false
}

// UserData is what a VM provider passes to the instance: the Proxy's own
// cloud-init as given when it has one (the image must then run a proxy on
// the request's port itself), else the generated cloud-config for the
// request's port and ranges, the entry's policy and the image's family.
// Every error is Permanent: retrying the same request cannot help. The
// result is Sensitive: it may be the user's, so it is never logged.
func UserData(req provider.CreateRequest, dest *egress.Policy, family Family, reporter servingreport.Publish) (provider.Sensitive, error) {
	if req.ClientAuth.Len() > 0 {
		if req.CloudInit != "" {
			// Like the destination rules: the image would run a proxy that
			// never heard of the users, open to every admitted address.
			return "", provider.Errorf(provider.ErrPermanent,
				"clientAuth: the users are enforced by the generated Squid configuration, and this Proxy brings its own cloudInit; drop one of them")
		}
		if _, err := clientauth.Parse([]byte(req.ClientAuth.Reveal())); err != nil {
			return "", provider.Errorf(provider.ErrPermanent, "clientAuth: %v", err)
		}
	}
	if req.CloudInit != "" {
		if req.GroupAddress != nil {
			return "", provider.Errorf(provider.ErrPermanent,
				"the group's address is held by the generated configuration (keepalived), and this member brings its own cloudInit; drop the template's cloudInit")
		}
		if len(req.Destinations) > 0 {
			// The rules live in the generated configuration; the user's
			// image would run a proxy that never heard of them.
			return "", provider.Errorf(provider.ErrPermanent,
				"destinations: the rules are enforced by the generated Squid configuration, and this Proxy brings its own cloudInit; drop one of them")
		}
		return req.CloudInit, nil
	}
	member, err := groupMember(req)
	if err != nil {
		return "", err
	}
	if dest == nil {
		dest = egress.Default()
	}
	clients, narrowed, errs := dest.ForRequest(req.AllowedSourceRanges, req.Destinations)
	if len(errs) > 0 {
		return "", provider.Errorf(provider.ErrPermanent, "%s", errs.ToAggregate().Error())
	}
	doc, err := CloudConfig(CloudConfigParams{Port: req.Port, Clients: clients, Destinations: narrowed, Family: family,
		ClientAuth: req.ClientAuth, Reporter: reporter, VRRP: member})
	if err != nil {
		return "", err
	}
	return provider.Sensitive(doc), nil
}

// groupMember is the request's part in its group's VRRP instance, or nil
// when it is no group member. The member's own address is its pool
// address, on the NIC the seed's network-config names when it matches it
// by MAC (as libvirt and Proxmox do); without one it cannot take part.
func groupMember(req provider.CreateRequest) (*vrrp.Member, error) {
	g := req.GroupAddress
	if g == nil {
		return nil, nil
	}
	if req.StaticAddress == nil {
		return nil, provider.Errorf(provider.ErrPermanent,
			"a group's address is held among its members' own pool addresses, and this member has none: give the entry an addressPool")
	}
	m := vrrp.Member{
		Interface: nocloud.MACMatchedName, Self: req.StaticAddress.Address.Addr(), Peers: g.Peers,
		Virtual: g.Virtual, RouterID: vrrp.RouterID(g.Group), Priority: vrrp.Priority(g.Index), Port: req.Port,
	}
	if err := m.Validate(); err != nil {
		return nil, provider.Errorf(provider.ErrPermanent, "%w", err)
	}
	return &m, nil
}

// reporterConfig is the serving reporter a VM's cloud-config installs: a
// group member's also says whether it holds the group's address.
func reporterConfig(in CloudConfigParams) servingreport.Config {
	c := servingreport.Config{Port: in.Port, Publish: in.Reporter, Echo: in.Destinations.Echo()}
	if in.VRRP != nil {
		c.GroupAddress = in.VRRP.Virtual.Addr()
	}
	return c
}
