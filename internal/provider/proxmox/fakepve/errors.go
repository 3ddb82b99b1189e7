package fakepve

import (
	"fmt"
	"net/http"
	"strings"
)

// Error is an answer PVE gives instead of data. Message is the text of the
// Perl die as PVE has it, usually with its trailing "\n"; the status line's
// reason phrase is its first line (pve-http-server AnyEvent.pm response():
// `($msg) = $msg =~ m/^(.*)$/m`). A JSON answer's body is
// {"data":null,"message":"<Message>"} plus "errors" (parameter -> text) on a
// 400 (Formatter/Standard.pm prepare_response_data, since pve-http-server
// "fix #6503: return api handler errors in the json body").
//
// Bare answers have no body and no Content-Type: those pve-http-server
// writes itself, outside the API handlers (a failed authentication, a
// permission refused while authenticating an upload, its 501s, and the
// proxy's 595/596 for a node that does not answer).
//
// Message may contain "{node}", "{vmid}" and "{storage}": they are replaced
// by the request's path parameters, so one injected fault fits any call.
type Error struct {
	Status  int
	Message string
	Errors  map[string]string
	Bare    bool
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Reason()) }

// Reason is the status line's reason phrase: the message's first line, or
// the standard text when the message is empty.
func (e *Error) Reason() string {
	msg, _, _ := strings.Cut(e.Message, "\n")
	if msg == "" {
		if t := http.StatusText(e.Status); t != "" {
			return t
		}
		return "Unknown"
	}
	return msg
}

func (e *Error) render(vars map[string]string) *Error {
	c := *e
	for k, v := range vars {
		c.Message = strings.ReplaceAll(c.Message, "{"+k+"}", v)
	}
	if e.Errors != nil {
		c.Errors = map[string]string{}
		for k, v := range e.Errors {
			for vk, vv := range vars {
				v = strings.ReplaceAll(v, "{"+vk+"}", vv)
			}
			c.Errors[k] = v
		}
	}
	return &c
}

// die is a plain Perl die inside an API handler: HTTP 500 with the message
// (PVE's HTTPServer.pm rest_handler: a non-exception error is status 500).
func die(format string, args ...any) *Error {
	return &Error{Status: http.StatusInternalServerError, Message: fmt.Sprintf(format, args...)}
}

// Constructors for the answers providers meet. Each names the source its
// text comes from; the paths are of the proxmox repositories (qemu-server,
// pve-manager, pve-common, pve-guest-common, pve-storage, pve-access-control,
// pve-http-server) as of their 2025-10..2026-08 snapshots.

// ConfigNotExist is how PVE reports a missing VM: 500, not 404, with the
// config path on the node the request went to.
// Source: pve-guest-common AbstractConfig.pm load_config; fixture config-does-not-exist.json.
func ConfigNotExist(node string, vmid int) *Error {
	return die("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist\n", node, vmid)
}

// NotOnNode is check_running's answer for a VM whose config is not on the
// node (stop, shutdown and suspend ask it before load_config).
// Source: qemu-server QemuConfig.pm assert_config_exists_on_node.
func NotOnNode(node string, vmid int) *Error {
	return die("unable to find configuration file for VM %d on node '%s'\n", vmid, node)
}

// Locked is check_lock's answer for a VM with a `lock` in its config
// (clone, destroyed, suspended, backup, migrate, ...).
// Source: pve-guest-common AbstractConfig.pm check_lock.
func Locked(lock string) *Error { return die("VM is locked (%s)\n", lock) }

// LockTimeout is the answer when the VM's config lock file is held by
// another worker for the whole wait (10 s; 1 s for clone's target).
// Source: pve-common Tools.pm lock_file_full; fixture lock-timeout.json.
func LockTimeout(vmid int) *Error {
	return die("can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout\n", vmid)
}

// ParamErrors is "Parameter verification failed." with its errors map.
// Source: pve-common Exception.pm raise_param_exc, JSONSchema.pm validate.
func ParamErrors(errors map[string]string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: "Parameter verification failed.\n", Errors: errors}
}

// PermissionDenied is a failed privilege check: the path and the privilege
// (several joined by "|" when any of them would do).
// Source: pve-common Exception.pm raise_perm_exc, pve-access-control RPCEnvironment.pm check/check_any;
// fixture auth-permission-denied.json.
func PermissionDenied(path string, privs ...string) *Error {
	return &Error{Status: http.StatusForbidden,
		Message: fmt.Sprintf("Permission check failed (%s, %s)\n", path, strings.Join(privs, "|"))}
}

// NoTicket: no ticket and no API token in the request. A bare 401.
// Source: pve-manager HTTPServer.pm auth_handler; pve-http-server AnyEvent.pm answers an auth error
// with HTTP::Response->new(401, $err) and no content (theforeman/foreman_fog_proxmox#55 shows such a
// 401 with body "" and no Content-Type; proxmoxer/proxmoxer#31 "401 Unauthorized: No ticket - b”").
func NoTicket() *Error {
	return &Error{Status: http.StatusUnauthorized, Message: "No ticket\n", Bare: true}
}

// AuthFailed: an API token (or ticket) that does not verify: unknown user or
// token, wrong secret, expired, malformed. A bare 401.
// Source: pve-manager HTTPServer.pm auth_handler ("Authentication failed!").
func AuthFailed() *Error {
	return &Error{Status: http.StatusUnauthorized, Message: "Authentication failed!\n", Bare: true}
}

// Unreachable is pveproxy's answer when the node a request must be proxied
// to does not answer: AnyEvent::HTTP's pseudo status 595 (connection
// establishment: "Connection refused", "No route to host", "Connection timed
// out") or 596 (TLS, sending, headers), the error as reason, no body.
// Source: pve-http-server AnyEvent.pm proxy_request (passes Status and Reason through); AnyEvent::HTTP.
func Unreachable(status int, reason string) *Error {
	return &Error{Status: status, Message: reason + "\n", Bare: true}
}

// ConfigExists: clone (or create) onto a VMID whose config is on this node.
// Source: qemu-server API2/Qemu.pm clone_vm $load_and_check; fixture clone-config-file-exists.json.
func ConfigExists(vmid int) *Error {
	return die("unable to create VM %d: config file already exists\n", vmid)
}

// RunningDestroy: DELETE of a running VM.
// Source: qemu-server API2/Qemu.pm destroy_vm; fixture delete-running.json.
func RunningDestroy(vmid int) *Error { return die("VM %d is running - destroy failed\n", vmid) }

// NotRunning: suspend or resume of a VM that does not run.
// Source: qemu-server API2/Qemu.pm vm_suspend, vm_resume.
func NotRunning(vmid int) *Error { return die("VM %d not running\n", vmid) }

// AgentNotConfigured: the config has no `agent` key. Permanent.
// Source: qemu-server QemuServer/Agent.pm assert_agent_available; fixture
// agent-network-get-interfaces-not-configured.json.
func AgentNotConfigured() *Error { return die("No QEMU guest agent configured\n") }

// AgentVMNotRunning: the agent is asked about a VM that does not run.
// Source: as AgentNotConfigured; fixture agent-network-get-interfaces-vm-not-running.json.
func AgentVMNotRunning(vmid int) *Error { return die("VM %d is not running\n", vmid) }

// GuestAgentNotRunning: the guest agent does not answer its ping (still booting,
// not installed). Transient while the guest boots.
// Source: as AgentNotConfigured; fixture agent-network-get-interfaces-not-running.json.
func GuestAgentNotRunning() *Error { return die("QEMU guest agent is not running\n") }

// QMPTimeout: the agent took the ping but not the command in time.
// Source: bpg/terraform-provider-proxmox vms_agent_test.go; fixture
// agent-network-get-interfaces-qmp-timeout.json.
func QMPTimeout(command string) *Error {
	return die("qmp command '%s' failed - got timeout\n", command)
}

// AgentError: a guest agent command qemu-ga answered with an error; PVE
// dies with its description.
// Source: qemu-server QemuServer/Agent.pm agent_cmd, check_agent_error
// ("Agent error: $desc"); QMPClient.pm cmd (a qga error answer is
// returned as {error}, not died on).
func AgentError(desc string) *Error { return die("Agent error: %s\n", desc) }

// GuestFileNotFound: agent/file-read of a path the guest does not have.
// file-read opens it with no mode, so qemu-ga's "r"; its
// safe_open_or_create fails with error_setg_errno (": " and strerror).
// Source: as AgentError; qemu qga/commands-posix.c safe_open_or_create,
// qmp_guest_file_open; fixture agent-file-read-missing.json.
func GuestFileNotFound(path string) *Error {
	return AgentError("failed to open file '" + path + "' (mode: 'r'): No such file or directory")
}

// ExecPIDUnknown: agent/exec-status of a pid qemu-ga has no command for
// (never started, or its end already read).
// Source: qemu-server QemuServer/Agent.pm qemu_exec_status -> check_agent_error; qemu 7.2
// qga/commands.c qmp_guest_exec_status (QERR_INVALID_PARAMETER, "Invalid parameter '%s'", as
// Debian 12's guest agent has it; qemu reworded it later, with QERR_INVALID_PARAMETER's removal).
func ExecPIDUnknown() *Error { return AgentError("Invalid parameter 'pid'") }

// ExecNothing: agent/exec with neither a command nor input-data (an empty
// JSON array).
// Source: qemu-server QemuServer/Agent.pm qemu_exec.
func ExecNothing() *Error { return die("command or input-data (or both) required\n") }

// ExecWideCharacter: agent/exec input-data with a character above U+00FF:
// qemu_exec's encode_base64 takes the decoded parameter as octets and
// croaks.
// Source: qemu-server QemuServer/Agent.pm qemu_exec (line 135 of the 2026-08-17 snapshot);
// MIME::Base64 encode_base64.
func ExecWideCharacter() *Error {
	return die("Wide character in subroutine entry at /usr/share/perl5/PVE/QemuServer/Agent.pm line 135.\n")
}

// NoFreeVMID: /cluster/nextid found no free VMID in the datacenter range.
// Source: pve-manager API2/Cluster.pm nextid.
func NoFreeVMID(lower, upper int) *Error {
	return die("unable to get any free VMID in range [%d, %d]\n", lower, upper)
}

// StorageNotExist: a storage id the storage config does not have.
// Source: pve-storage Storage.pm storage_config.
func StorageNotExist(storage string) *Error { return die("storage '%s' does not exist\n", storage) }

// StorageNotOnNode: a storage restricted to other nodes.
// Source: pve-storage Storage.pm storage_check_node.
func StorageNotOnNode(storage, node string) *Error {
	return die("storage '%s' is not available on node '%s'\n", storage, node)
}

// StorageDisabled: a storage with `disable` set.
// Source: pve-storage Storage.pm storage_check_enabled.
func StorageDisabled(storage string) *Error { return die("storage '%s' is disabled\n", storage) }

// NoSuchNode is the answer for a node name the cluster does not know: the
// proxy code looks its address up and fails.
// Source: pve-cluster Cluster.pm remote_node_ip, pve-common Network.pm get_ip_from_hostname,
// Tools.pm getaddrinfo_all ("Name or service not known" is getaddrinfo's EAI_NONAME text).
func NoSuchNode(node string) *Error {
	return die("hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known\n", node, node)
}

// notImplemented is rest_handler's answer for a path or method no handler
// serves: 501 with a JSON body whose message has no trailing newline.
// Source: pve-manager HTTPServer.pm rest_handler.
func notImplemented(method, rel string) *Error {
	return &Error{Status: http.StatusNotImplemented, Message: fmt.Sprintf("Method '%s %s' not implemented", method, rel)}
}

// serverError is one of pve-http-server's own bare errors (501, 506, ...).
// Source: pve-http-server AnyEvent.pm ($self->error(...)).
func serverError(status int, msg string) *Error {
	return &Error{Status: status, Message: msg, Bare: true}
}
