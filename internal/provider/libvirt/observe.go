package libvirt

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// Logging tiers: V(1) one "libvirt call" line per RPC (rpc, host, the
// identifiers, duration, and on failure the error, its class and libvirt's
// code) and one line per dial; V(2) detail (XML, addresses, sizes), written
// by the callers. The method boundary writes each operation's outcome line.
// Never logged: cloud-init and user-data, vendor-data, key material (the
// credential loaders never pass file content on), upload and download
// bodies.
//
// Spans: one "libvirt.<RPC>" per seam call and "libvirt.dial" per dial,
// children of the operation span; none is started without a parent.

// scopeName is the instrumentation scope of this package's spans.
const scopeName = "github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/libvirt"

// Span attributes.
const (
	attrHost    = attribute.Key("libvirt.host")
	attrAddress = attribute.Key("libvirt.address")
	attrUser    = attribute.Key("libvirt.user")
	attrStage   = attribute.Key("libvirt.stage")
	attrDomain  = attribute.Key("libvirt.domain")
	attrPool    = attribute.Key("libvirt.pool")
	attrVolume  = attribute.Key("libvirt.volume")
	attrBytes   = attribute.Key("libvirt.bytes")
	attrSource  = attribute.Key("libvirt.address_source")
	// attrAgentCommand is a guest agent command's name, never its
	// arguments.
	attrAgentCommand = attribute.Key("libvirt.agent_command")
	attrCode         = attribute.Key("libvirt.libvirt_code")
	attrClass        = attribute.Key("libvirt.error_class")
)

func (p *Provider) tracer() trace.Tracer {
	tp := p.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(scopeName)
}

// startSpan starts name under ctx's span, or nothing when ctx has none.
func startSpan(ctx context.Context, tr trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endSpan records err on span (which may be nil) and ends it.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetAttributes(attrClass.String(provider.ClassName(err)))
		if code, ok := libvirtCode(err); ok {
			span.SetAttributes(attrCode.String(code.String()))
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, provider.ClassName(err))
	}
	span.End()
}

// startDial observes one dial of h: a libvirt.dial span and, at its end, a
// V(1) line saying it connected or at which stage it failed.
func (p *Provider) startDial(ctx context.Context, h Host) (context.Context, func(error)) {
	start := time.Now()
	ctx, span := startSpan(ctx, p.tracer(), "libvirt.dial",
		attrHost.String(h.Name), attrAddress.String(h.Address), attrUser.String(h.User))
	return ctx, func(err error) {
		log := logr.FromContextOrDiscard(ctx).V(1)
		kv := []any{"host", h.Name, "address", h.Address, "user", h.User, "duration", time.Since(start).Round(time.Millisecond)}
		if err != nil {
			stage := ""
			if de, ok := dialErrorOf(err); ok {
				stage = de.Stage
			}
			if span != nil {
				span.SetAttributes(attrStage.String(stage))
			}
			log.Info("libvirt host connect failed", append(kv, "stage", stage, "class", provider.ClassName(err), "error", err.Error())...)
		} else {
			log.Info("libvirt host connected", kv...)
		}
		endSpan(span, err)
	}
}

// observed decorates a connection's seam: every RPC gets its span and its
// "libvirt call" line. It is applied once, where a connection is made
// (Provider.connect), so provider code never holds an undecorated one.
type observed struct {
	inner  backend
	host   string
	tracer trace.Tracer
}

var _ backend = (*observed)(nil)

func (p *Provider) observe(host string, b backend) backend {
	return &observed{inner: b, host: host, tracer: p.tracer()}
}

// begin starts one RPC's observation; the returned function ends it.
func (o *observed) begin(ctx context.Context, rpc string, ids ...attribute.KeyValue) (context.Context, func(error)) {
	start := time.Now()
	ctx, span := startSpan(ctx, o.tracer, "libvirt."+rpc, append([]attribute.KeyValue{attrHost.String(o.host)}, ids...)...)
	return ctx, func(err error) {
		kv := []any{"rpc", rpc, "host", o.host}
		for _, id := range ids {
			kv = append(kv, strings.TrimPrefix(string(id.Key), "libvirt."), id.Value.Emit())
		}
		kv = append(kv, "duration", time.Since(start).Round(time.Microsecond))
		if err != nil {
			kv = append(kv, "class", provider.ClassName(err), "error", err.Error())
			if code, ok := libvirtCode(err); ok {
				kv = append(kv, "libvirtCode", code.String())
			}
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("libvirt call", kv...)
		endSpan(span, err)
	}
}

func (o *observed) Disconnected() <-chan struct{} { return o.inner.Disconnected() }
func (o *observed) Close() error                  { return o.inner.Close() }

func (o *observed) ConnectGetLibVersion(ctx context.Context) (uint64, error) {
	ctx, end := o.begin(ctx, "ConnectGetLibVersion")
	v, err := o.inner.ConnectGetLibVersion(ctx)
	end(err)
	return v, err
}

func (o *observed) ConnectGetHostname(ctx context.Context) (string, error) {
	ctx, end := o.begin(ctx, "ConnectGetHostname")
	v, err := o.inner.ConnectGetHostname(ctx)
	end(err)
	return v, err
}

func (o *observed) ConnectGetCapabilities(ctx context.Context) (string, error) {
	ctx, end := o.begin(ctx, "ConnectGetCapabilities")
	v, err := o.inner.ConnectGetCapabilities(ctx)
	end(err)
	return v, err
}

func (o *observed) NodeGetFreeMemory(ctx context.Context) (uint64, error) {
	ctx, end := o.begin(ctx, "NodeGetFreeMemory")
	v, err := o.inner.NodeGetFreeMemory(ctx)
	end(err)
	return v, err
}

func (o *observed) StoragePoolLookupByName(ctx context.Context, name string) (libvirt.StoragePool, error) {
	ctx, end := o.begin(ctx, "StoragePoolLookupByName", attrPool.String(name))
	v, err := o.inner.StoragePoolLookupByName(ctx, name)
	end(err)
	return v, err
}

func (o *observed) StoragePoolGetInfo(ctx context.Context, pool libvirt.StoragePool) (poolInfo, error) {
	ctx, end := o.begin(ctx, "StoragePoolGetInfo", attrPool.String(pool.Name))
	v, err := o.inner.StoragePoolGetInfo(ctx, pool)
	end(err)
	return v, err
}

func (o *observed) StoragePoolRefresh(ctx context.Context, pool libvirt.StoragePool) error {
	ctx, end := o.begin(ctx, "StoragePoolRefresh", attrPool.String(pool.Name))
	err := o.inner.StoragePoolRefresh(ctx, pool)
	end(err)
	return err
}

func (o *observed) StoragePoolListAllVolumes(ctx context.Context, pool libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	ctx, end := o.begin(ctx, "StoragePoolListAllVolumes", attrPool.String(pool.Name))
	v, err := o.inner.StoragePoolListAllVolumes(ctx, pool)
	end(err)
	return v, err
}

func (o *observed) StorageVolLookupByName(ctx context.Context, pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	ctx, end := o.begin(ctx, "StorageVolLookupByName", attrPool.String(pool.Name), attrVolume.String(name))
	v, err := o.inner.StorageVolLookupByName(ctx, pool, name)
	end(err)
	return v, err
}

func (o *observed) StorageVolGetInfo(ctx context.Context, vol libvirt.StorageVol) (volInfo, error) {
	ctx, end := o.begin(ctx, "StorageVolGetInfo", attrPool.String(vol.Pool), attrVolume.String(vol.Name))
	v, err := o.inner.StorageVolGetInfo(ctx, vol)
	end(err)
	return v, err
}

func (o *observed) StorageVolGetXMLDesc(ctx context.Context, vol libvirt.StorageVol) (string, error) {
	ctx, end := o.begin(ctx, "StorageVolGetXMLDesc", attrPool.String(vol.Pool), attrVolume.String(vol.Name))
	v, err := o.inner.StorageVolGetXMLDesc(ctx, vol)
	end(err)
	return v, err
}

func (o *observed) StorageVolGetPath(ctx context.Context, vol libvirt.StorageVol) (string, error) {
	ctx, end := o.begin(ctx, "StorageVolGetPath", attrPool.String(vol.Pool), attrVolume.String(vol.Name))
	v, err := o.inner.StorageVolGetPath(ctx, vol)
	end(err)
	return v, err
}

func (o *observed) StorageVolCreateXML(ctx context.Context, pool libvirt.StoragePool, xml string) (libvirt.StorageVol, error) {
	ctx, end := o.begin(ctx, "StorageVolCreateXML", attrPool.String(pool.Name))
	v, err := o.inner.StorageVolCreateXML(ctx, pool, xml)
	end(err)
	return v, err
}

func (o *observed) StorageVolUpload(ctx context.Context, vol libvirt.StorageVol, r io.Reader, length uint64) error {
	ctx, end := o.begin(ctx, "StorageVolUpload", attrPool.String(vol.Pool), attrVolume.String(vol.Name), attrBytes.Int64(int64(length)))
	err := o.inner.StorageVolUpload(ctx, vol, r, length)
	end(err)
	return err
}

func (o *observed) StorageVolDelete(ctx context.Context, vol libvirt.StorageVol) error {
	ctx, end := o.begin(ctx, "StorageVolDelete", attrPool.String(vol.Pool), attrVolume.String(vol.Name))
	err := o.inner.StorageVolDelete(ctx, vol)
	end(err)
	return err
}

func (o *observed) ConnectListAllDomains(ctx context.Context) ([]libvirt.Domain, error) {
	ctx, end := o.begin(ctx, "ConnectListAllDomains")
	v, err := o.inner.ConnectListAllDomains(ctx)
	end(err)
	return v, err
}

func (o *observed) DomainLookupByName(ctx context.Context, name string) (libvirt.Domain, error) {
	ctx, end := o.begin(ctx, "DomainLookupByName", attrDomain.String(name))
	v, err := o.inner.DomainLookupByName(ctx, name)
	end(err)
	return v, err
}

func (o *observed) DomainDefineXML(ctx context.Context, xml string) (libvirt.Domain, error) {
	ctx, end := o.begin(ctx, "DomainDefineXML")
	v, err := o.inner.DomainDefineXML(ctx, xml)
	end(err)
	return v, err
}

func (o *observed) DomainGetXMLDesc(ctx context.Context, dom libvirt.Domain) (string, error) {
	ctx, end := o.begin(ctx, "DomainGetXMLDesc", attrDomain.String(dom.Name))
	v, err := o.inner.DomainGetXMLDesc(ctx, dom)
	end(err)
	return v, err
}

func (o *observed) DomainGetMetadata(ctx context.Context, dom libvirt.Domain, uri string) (string, error) {
	ctx, end := o.begin(ctx, "DomainGetMetadata", attrDomain.String(dom.Name))
	v, err := o.inner.DomainGetMetadata(ctx, dom, uri)
	end(err)
	return v, err
}

func (o *observed) DomainSetMetadata(ctx context.Context, dom libvirt.Domain, xml, key, uri string, impact libvirt.DomainModificationImpact) error {
	ctx, end := o.begin(ctx, "DomainSetMetadata", attrDomain.String(dom.Name))
	err := o.inner.DomainSetMetadata(ctx, dom, xml, key, uri, impact)
	end(err)
	return err
}

func (o *observed) DomainGetState(ctx context.Context, dom libvirt.Domain) (libvirt.DomainState, error) {
	ctx, end := o.begin(ctx, "DomainGetState", attrDomain.String(dom.Name))
	v, err := o.inner.DomainGetState(ctx, dom)
	end(err)
	return v, err
}

func (o *observed) DomainCreate(ctx context.Context, dom libvirt.Domain) error {
	ctx, end := o.begin(ctx, "DomainCreate", attrDomain.String(dom.Name))
	err := o.inner.DomainCreate(ctx, dom)
	end(err)
	return err
}

func (o *observed) DomainResume(ctx context.Context, dom libvirt.Domain) error {
	ctx, end := o.begin(ctx, "DomainResume", attrDomain.String(dom.Name))
	err := o.inner.DomainResume(ctx, dom)
	end(err)
	return err
}

func (o *observed) DomainPMWakeup(ctx context.Context, dom libvirt.Domain) error {
	ctx, end := o.begin(ctx, "DomainPMWakeup", attrDomain.String(dom.Name))
	err := o.inner.DomainPMWakeup(ctx, dom)
	end(err)
	return err
}

func (o *observed) DomainDestroy(ctx context.Context, dom libvirt.Domain) error {
	ctx, end := o.begin(ctx, "DomainDestroy", attrDomain.String(dom.Name))
	err := o.inner.DomainDestroy(ctx, dom)
	end(err)
	return err
}

func (o *observed) DomainUndefine(ctx context.Context, dom libvirt.Domain) error {
	ctx, end := o.begin(ctx, "DomainUndefine", attrDomain.String(dom.Name))
	err := o.inner.DomainUndefine(ctx, dom)
	end(err)
	return err
}

func (o *observed) DomainInterfaceAddresses(ctx context.Context, dom libvirt.Domain, src libvirt.DomainInterfaceAddressesSource) ([]libvirt.DomainInterface, error) {
	ctx, end := o.begin(ctx, "DomainInterfaceAddresses", attrDomain.String(dom.Name), attrSource.String(addressSourceName(src)))
	v, err := o.inner.DomainInterfaceAddresses(ctx, dom, src)
	end(err)
	return v, err
}

func (o *observed) DomainAgentCommand(ctx context.Context, dom libvirt.Domain, cmd string, timeoutSec int32) (string, error) {
	ctx, end := o.begin(ctx, "DomainAgentCommand", attrDomain.String(dom.Name), attrAgentCommand.String(agentCommandName(cmd)))
	v, err := o.inner.DomainAgentCommand(ctx, dom, cmd, timeoutSec)
	end(err)
	return v, err
}

// addressSourceName names an address source as users know it.
func addressSourceName(src libvirt.DomainInterfaceAddressesSource) string {
	switch src {
	case libvirt.DomainInterfaceAddressesSrcAgent:
		return "agent"
	case libvirt.DomainInterfaceAddressesSrcLease:
		return "lease"
	case libvirt.DomainInterfaceAddressesSrcArp:
		return "arp"
	}
	return src.String()
}
