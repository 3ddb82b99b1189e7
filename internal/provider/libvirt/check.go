package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Check reasons of this provider, beside the shared ones (Healthy,
// Unreachable, Timeout, Unauthorized, Forbidden, APIError, Degraded).
const (
	// ReasonCredentialsUnavailable: the SSH key or known_hosts file is
	// missing, unreadable or unparseable.
	ReasonCredentialsUnavailable = "CredentialsUnavailable"
	// ReasonPoolNotFound: the host has no storage pool of the configured name.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonPoolNotActive: the pool exists but is not running.
	ReasonPoolNotActive = "PoolNotActive"
	// ReasonHypervisorUnavailable: libvirt offers no QEMU guest of the
	// configured (or any usable) domain type.
	ReasonHypervisorUnavailable = "HypervisorUnavailable"
)

// Check probes every host concurrently, each on a fresh connection that is
// closed when its probe ends (the pooled connections are neither used nor
// disturbed): libvirt's version, the hostname, the domain type in use
// (configured, or detected from the host's capabilities), the pool's state,
// capacity and free space, and the host's free memory. Details are filled
// in as far as each probe got, under "<host>.<fact>"; "hostKeyCheck" says
// how host keys are checked.
//
// Reasons: Healthy; for one host its reason: CredentialsUnavailable,
// Unauthorized (SSH key refused, host key mismatch or unknown host, named in
// the message), Forbidden (sshd prohibits the socket forward, or libvirt
// refuses the user), Unreachable, Timeout (the round's ctx ended),
// PoolNotFound, PoolNotActive, HypervisorUnavailable, APIError; for several
// hosts Degraded when some are healthy, else the first failing host's.
func (p *Provider) Check(ctx context.Context) provider.CheckResult {
	results := make([]hostCheck, len(p.hosts))
	var wg sync.WaitGroup
	for i, h := range p.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = p.checkHost(ctx, h)
		}()
	}
	wg.Wait()
	return p.summarize(results)
}

// hostCheck is one host's probe.
type hostCheck struct {
	host    Host
	healthy bool
	reason  string
	message string
	details map[string]string
}

func (c *hostCheck) fail(ctx context.Context, err error, what string) hostCheck {
	c.reason = checkReason(ctx, err)
	c.message = err.Error()
	if what != "" {
		c.message = what + ": " + c.message
	}
	return *c
}

func (p *Provider) checkHost(ctx context.Context, h Host) hostCheck {
	addr, _ := sshAddress(h.Address)
	c := hostCheck{host: h, details: map[string]string{
		"address": addr, "user": h.User, "socket": h.Socket, "pool": h.Pool,
	}}
	if err := ctx.Err(); err != nil {
		return c.fail(ctx, err, "")
	}
	b, err := p.table.fresh(ctx, h)
	if err != nil {
		return c.fail(ctx, err, "")
	}
	defer func() { _ = b.Close() }()

	v, err := b.ConnectGetLibVersion(ctx)
	if err != nil {
		return c.fail(ctx, err, "reading libvirt's version")
	}
	c.details["libvirtVersion"] = formatLibvirtVersion(v)
	hostname, err := b.ConnectGetHostname(ctx)
	if err != nil {
		return c.fail(ctx, err, "reading the hostname")
	}
	c.details["hostname"] = hostname
	caps, err := b.ConnectGetCapabilities(ctx)
	if err != nil {
		return c.fail(ctx, err, "reading the host's capabilities")
	}
	dt, why, err := chooseDomainType(h.DomainType, caps)
	if err != nil {
		c.reason, c.message = ReasonHypervisorUnavailable, err.Error()
		return c
	}
	c.details["domainType"], c.details["domainTypeReason"] = dt, why
	pool, err := b.StoragePoolLookupByName(ctx, h.Pool)
	if err != nil {
		return c.fail(ctx, err, "looking up pool "+h.Pool)
	}
	info, err := b.StoragePoolGetInfo(ctx, pool)
	if err != nil {
		return c.fail(ctx, err, "reading pool "+h.Pool)
	}
	c.details["poolState"] = poolStateName(info.State)
	c.details["poolCapacityGiB"] = gib(info.Capacity)
	c.details["poolAvailableGiB"] = gib(info.Available)
	if info.State != libvirt.StoragePoolRunning {
		c.reason = ReasonPoolNotActive
		c.message = fmt.Sprintf("pool %s is %s, not running: start it (virsh pool-start %s) and mark it autostart", h.Pool, poolStateName(info.State), h.Pool)
		return c
	}
	free, err := b.NodeGetFreeMemory(ctx)
	if err != nil {
		return c.fail(ctx, err, "reading the host's free memory")
	}
	c.details["freeMemoryMiB"] = strconv.FormatUint(free>>20, 10)
	c.healthy, c.reason = true, provider.ReasonHealthy
	c.message = fmt.Sprintf("libvirt %s on %s, domain type %s (%s), pool %s running with %s of %s GiB free, %d MiB memory free",
		c.details["libvirtVersion"], hostname, dt, why, h.Pool, c.details["poolAvailableGiB"], c.details["poolCapacityGiB"], free>>20)
	return c
}

// summarize makes one result of the hosts' probes, in config order.
func (p *Provider) summarize(hosts []hostCheck) provider.CheckResult {
	res := provider.CheckResult{Target: "hosts", Details: map[string]string{
		"hosts":        strconv.Itoa(len(hosts)),
		"hostKeyCheck": p.auth.hostKeyPolicy(),
	}}
	addrs := make([]string, len(hosts))
	var healthy int
	var failed []hostCheck
	for i, c := range hosts {
		addrs[i] = c.details["address"]
		for k, v := range c.details {
			res.Details[c.host.Name+"."+k] = v
		}
		res.Details[c.host.Name+".reason"] = c.reason
		if c.healthy {
			healthy++
		} else {
			failed = append(failed, c)
		}
	}
	res.Address = strings.Join(addrs, ", ")
	parts := make([]string, 0, len(hosts))
	for _, c := range hosts {
		if c.healthy {
			parts = append(parts, fmt.Sprintf("host %s: %s", c.host.Name, c.message))
		} else {
			parts = append(parts, fmt.Sprintf("host %s: %s: %s", c.host.Name, c.reason, c.message))
		}
	}
	res.Message = strings.Join(parts, "; ")
	switch {
	case len(failed) == 0:
		res.Healthy, res.Reason = true, provider.ReasonHealthy
	case healthy > 0:
		res.Reason = provider.ReasonDegraded
		res.Message = fmt.Sprintf("%d of %d hosts unhealthy; %s", len(failed), len(hosts), res.Message)
	default:
		res.Reason = failed[0].reason
	}
	if p.auth.insecure {
		res.Message += "; WARNING: SSH host keys are not verified (insecureIgnoreHostKey)"
	}
	return res
}

// checkReason is the reason for a probe that failed with err. A round
// whose ctx ended is Timeout whatever stage it reached; a dial that ran
// out of its own budget is Unreachable.
func checkReason(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return provider.ReasonTimeout
	}
	if de, ok := dialErrorOf(err); ok {
		switch de.Stage {
		case stageCredentials:
			return ReasonCredentialsUnavailable
		case stageSSH:
			if de.Refusal != refusalNone {
				return provider.ReasonUnauthorized
			}
		case stageSocket:
			var oce *ssh.OpenChannelError
			if errors.As(err, &oce) && oce.Reason == ssh.Prohibited {
				return provider.ReasonForbidden
			}
		case stageLibvirt:
			if hasCode(err, libvirt.ErrAuthFailed, libvirt.ErrAccessDenied, libvirt.ErrAuthCancelled, libvirt.ErrAuthUnavailable) {
				return provider.ReasonForbidden
			}
		}
		return provider.ReasonUnreachable
	}
	switch {
	case hasCode(err, libvirt.ErrAuthFailed, libvirt.ErrAccessDenied):
		return provider.ReasonForbidden
	case hasCode(err, libvirt.ErrNoStoragePool):
		return ReasonPoolNotFound
	}
	if _, ok := libvirtCode(err); ok {
		return provider.ReasonAPIError
	}
	return provider.ReasonUnreachable
}

// formatLibvirtVersion turns libvirt's major*1e6+minor*1e3+micro into
// "9.0.0".
func formatLibvirtVersion(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
}

func gib(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) }

func poolStateName(s libvirt.StoragePoolState) string {
	switch s {
	case libvirt.StoragePoolInactive:
		return "inactive"
	case libvirt.StoragePoolBuilding:
		return "building"
	case libvirt.StoragePoolRunning:
		return "running"
	case libvirt.StoragePoolDegraded:
		return "degraded"
	case libvirt.StoragePoolInaccessible:
		return "inaccessible"
	}
	return s.String()
}

// capabilities is the part of libvirt's capabilities XML the domain type
// choice reads.
type capabilities struct {
	Host struct {
		CPU struct {
			Arch     string `xml:"arch"`
			Features []struct {
				Name string `xml:"name,attr"`
			} `xml:"feature"`
		} `xml:"cpu"`
	} `xml:"host"`
	Guests []struct {
		OSType string `xml:"os_type"`
		Arch   struct {
			Name    string `xml:"name,attr"`
			Domains []struct {
				Type string `xml:"type,attr"`
			} `xml:"domain"`
		} `xml:"arch"`
	} `xml:"guest"`
}

// chooseDomainType decides the domain type of a host from its capabilities
// XML: the configured one if the host offers it; else kvm when libvirt
// offers kvm guests and the host CPU has vmx or svm, qemu (emulation)
// otherwise. A /dev/kvm that is a software hypervisor (kvm_pvm on nested
// clouds: no vmx or svm in the CPU) makes libvirt offer kvm, but guests do
// not boot usefully there, so the CPU flags decide. why says which rule
// chose it, for the Checker's details.
func chooseDomainType(configured, capsXML string) (typ, why string, err error) {
	var caps capabilities
	if err := xml.Unmarshal([]byte(capsXML), &caps); err != nil {
		return "", "", fmt.Errorf("the host's capabilities XML does not parse: %v", err)
	}
	arch := caps.Host.CPU.Arch
	offered := map[string]bool{}
	for _, g := range caps.Guests {
		if g.OSType != "hvm" || (arch != "" && g.Arch.Name != arch) {
			continue
		}
		for _, d := range g.Arch.Domains {
			offered[d.Type] = true
		}
	}
	virt := ""
	for _, f := range caps.Host.CPU.Features {
		if f.Name == "vmx" || f.Name == "svm" {
			virt = f.Name
		}
	}
	if configured != "" {
		if !offered[configured] {
			return "", "", fmt.Errorf("domainType %s is configured, but libvirt offers no %s guest for %s here%s",
				configured, configured, archName(arch), kvmHint(configured))
		}
		return configured, "configured", nil
	}
	switch {
	case offered[DomainTypeKVM] && virt != "":
		return DomainTypeKVM, "detected: libvirt offers kvm and the CPU has " + virt, nil
	case offered[DomainTypeQEMU] && offered[DomainTypeKVM]:
		return DomainTypeQEMU, "detected: libvirt offers kvm, but the CPU has neither vmx nor svm (a software /dev/kvm boots no useful guest), so emulation", nil
	case offered[DomainTypeQEMU]:
		return DomainTypeQEMU, "detected: libvirt offers no kvm guest (no usable /dev/kvm), so emulation", nil
	}
	return "", "", fmt.Errorf("libvirt offers no QEMU guest for %s: is qemu-system-%s installed on the host?", archName(arch), archName(arch))
}

func archName(arch string) string {
	if arch == "" {
		return "the host's architecture"
	}
	return arch
}

func kvmHint(t string) string {
	if t == DomainTypeKVM {
		return " (is /dev/kvm present and usable by libvirt's QEMU?)"
	}
	return ""
}
