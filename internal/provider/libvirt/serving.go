package libvirt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/servingreport"
)

// The serving signal (profile: guest-agent): the guest's reporter writes
// servingreport.ReportPath every few seconds; the provider reads it
// through the QEMU guest agent (guest-file-open, -read, -close: three
// agent commands over the connection it already has), so no network path
// to the guest is needed. libvirt marks a domain that was sent a raw agent
// command as tainted (custom-ga-command), once, in its log.

const (
	// agentTimeoutSec bounds each agent command inside libvirt; a guest
	// whose agent does not answer in time is read as not answering yet.
	agentTimeoutSec = 5
	// maxReportBytes is more than a report ever holds (a few hundred
	// bytes); the rest of a longer file is not read.
	maxReportBytes = 4096
)

// serving reads the report of a domain whose metadata says its guest
// runs the reporter (a domain made before it, or with a site's own
// vendor-data, has no signal: Ready on its address as before). Only the caller's ctx ending is an
// error: every other failure is a signal that says why the proxy is not
// known to answer.
func (p *Provider) serving(ctx context.Context, b backend, dom libvirt.Domain) (servingreport.Signal, error) {
	text, err := readGuestFile(ctx, b, dom, servingreport.ReportPath, maxReportBytes)
	if err != nil {
		if ctx.Err() != nil {
			return servingreport.Signal{}, provider.Errorf(provider.ErrTransient, "reading the serving report of domain %s: %w", dom.Name, ctx.Err())
		}
		logr.FromContextOrDiscard(ctx).V(2).Info("libvirt guest report unread", "error", shortError(err))
		switch {
		case hasCode(err, libvirt.ErrAgentUnresponsive, libvirt.ErrAgentUnsynced):
			return servingreport.Unread("the guest agent does not answer yet"), nil
		case guestFileMissing(err):
			return servingreport.Unread("the guest has not reported yet: cloud-init starts its reporter"), nil
		}
		return servingreport.Unread("reading the guest's report through its agent failed: " + shortError(err)), nil
	}
	r, err := servingreport.Parse(text)
	if err != nil {
		return servingreport.Unread("the guest's report does not parse: " + err.Error()), nil
	}
	return r.Signal(p.now()), nil
}

// readGuestFile reads up to max bytes of a file on the guest through its
// agent, closing what it opened.
func readGuestFile(ctx context.Context, b backend, dom libvirt.Domain, path string, max int) (string, error) {
	var handle int64
	if err := agentCommand(ctx, b, dom, "guest-file-open", map[string]any{"path": path, "mode": "r"}, &handle); err != nil {
		return "", err
	}
	defer func() {
		// A handle left open stays open in qemu-ga until it restarts; the
		// close is tried even when ctx ended, on a context of its own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*agentTimeoutSec*time.Second)
		defer cancel()
		_ = agentCommand(cctx, b, dom, "guest-file-close", map[string]any{"handle": handle}, nil)
	}()
	var read struct {
		Count int    `json:"count"`
		Buf   string `json:"buf-b64"`
		EOF   bool   `json:"eof"`
	}
	if err := agentCommand(ctx, b, dom, "guest-file-read", map[string]any{"handle": handle, "count": max}, &read); err != nil {
		return "", err
	}
	data, err := base64.StdEncoding.DecodeString(read.Buf)
	if err != nil {
		return "", fmt.Errorf("guest-file-read of %s: buf-b64: %w", path, err)
	}
	return string(data), nil
}

// guestFileMissing says whether err is the agent's answer to opening a
// file that is not there: qemu-ga fails guest-file-open with the system's
// strerror, which libvirt passes on in an internal error (no code of its
// own).
func guestFileMissing(err error) bool {
	return strings.Contains(err.Error(), "No such file or directory")
}

// agentCommand runs one agent command and decodes its "return" into ret
// (nil: ignored).
func agentCommand(ctx context.Context, b backend, dom libvirt.Domain, execute string, args map[string]any, ret any) error {
	cmd, err := json.Marshal(map[string]any{"execute": execute, "arguments": args})
	if err != nil {
		return err
	}
	out, err := b.DomainAgentCommand(ctx, dom, string(cmd), agentTimeoutSec)
	if err != nil {
		return err
	}
	if ret == nil {
		return nil
	}
	var answer struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal([]byte(out), &answer); err != nil || answer.Return == nil {
		return fmt.Errorf("%s: the agent answered %.80q", execute, out)
	}
	if err := json.Unmarshal(answer.Return, ret); err != nil {
		return fmt.Errorf("%s: %w", execute, err)
	}
	return nil
}

// agentCommandName is the command's name for a span, never its arguments.
func agentCommandName(cmd string) string {
	var c struct {
		Execute string `json:"execute"`
	}
	if json.Unmarshal([]byte(cmd), &c) != nil || c.Execute == "" {
		return "unknown"
	}
	return c.Execute
}
