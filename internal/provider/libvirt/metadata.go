package libvirt

import (
	"bytes"
	"encoding/xml"
	"time"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The marks live in one element of the domain's <metadata>, in this
// package's own namespace. The namespace and the element are a stored
// format: every instance on every host carries them, and ListByTag, Get and
// adoption find instances by them, so they are the same whichever type name
// (kvm or kvm2) wrote them, and never change (TestMetadataGolden pins them).
const (
	// metadataURI is the element's namespace, what DomainGetMetadata and
	// DomainSetMetadata select it by.
	metadataURI = "https://egress.proxy-operator.dev/libvirt/instance/v1"
	// metadataKey is the namespace prefix libvirt writes in the domain XML.
	metadataKey = "egressproxy"
)

// instanceMetadata is the element as parsed: the provider marks, when the
// instance was made, and for people reading `virsh dumpxml`, its Proxy.
// Matched by local name, so a prefixed or unprefixed element reads alike.
type instanceMetadata struct {
	XMLName      xml.Name `xml:"instance"`
	Managed      string   `xml:"managed"`
	UID          string   `xml:"uid"`
	Installation string   `xml:"installation"`
	CreatedAt    string   `xml:"createdAt"`
	Proxy        *proxyOf `xml:"proxy,omitempty"`
	// ServingReport names where the guest's serving reporter publishes
	// ("file": servingreport.ReportPath); absent on domains made before
	// the reporter, or with a site's own vendor-data: no serving signal.
	ServingReport string `xml:"servingReport"`
}

// instanceMetadataOut is the same element as written, in its namespace.
type instanceMetadataOut struct {
	XMLName       xml.Name `xml:"https://egress.proxy-operator.dev/libvirt/instance/v1 instance"`
	Managed       string   `xml:"managed,omitempty"`
	UID           string   `xml:"uid,omitempty"`
	Installation  string   `xml:"installation,omitempty"`
	CreatedAt     string   `xml:"createdAt,omitempty"`
	Proxy         *proxyOf `xml:"proxy,omitempty"`
	ServingReport string   `xml:"servingReport,omitempty"`
}

// servingReportFile is the metadata's servingReport of a domain whose
// vendor-data installs the reporter.
const servingReportFile = "file"

type proxyOf struct {
	Namespace string `xml:"namespace,attr"`
	Name      string `xml:"name,attr"`
}

// buildMetadata renders the element, in its namespace (libvirt requires
// one on every <metadata> child). Whether DomainSetMetadata keeps this
// declaration beside the key's prefix is for the real-libvirtd tests to
// show; parseMetadata reads either form.
func buildMetadata(m provider.Marks, createdAt time.Time, proxyNamespace, proxyName string, servingReport bool) (string, error) {
	md := instanceMetadataOut{UID: m.UID, Installation: m.Installation}
	if servingReport {
		md.ServingReport = servingReportFile
	}
	if m.Managed {
		md.Managed = provider.MarkManagedValue
	}
	if !createdAt.IsZero() {
		md.CreatedAt = createdAt.UTC().Format(time.RFC3339)
	}
	if proxyNamespace != "" || proxyName != "" {
		md.Proxy = &proxyOf{Namespace: proxyNamespace, Name: proxyName}
	}
	out, err := xml.Marshal(md)
	if err != nil {
		return "", provider.Errorf(provider.ErrPermanent, "rendering the instance metadata: %w", err)
	}
	return string(out), nil
}

// parsedMetadata is what an instance's element says.
type parsedMetadata struct {
	Marks     provider.Marks
	CreatedAt time.Time // zero: unknown (absent or unparsable)
	// ServingReport: the guest's reporter writes its report file.
	ServingReport bool
}

// parseMetadata reads the element as DomainGetMetadata returns it (with or
// without the namespace declared; elements are matched by local name). An
// element that is not XML is Permanent: somebody wrote it by hand, and
// guessing could adopt or collect what is not ours.
func parseMetadata(s string) (parsedMetadata, error) {
	var md instanceMetadata
	dec := xml.NewDecoder(bytes.NewReader([]byte(s)))
	if err := dec.Decode(&md); err != nil {
		return parsedMetadata{}, provider.Errorf(provider.ErrPermanent, "the domain's %s metadata element does not parse: %v", metadataURI, err)
	}
	if md.XMLName.Local != "instance" {
		return parsedMetadata{}, provider.Errorf(provider.ErrPermanent, "the domain's %s metadata element is <%s>, not <instance>", metadataURI, md.XMLName.Local)
	}
	out := parsedMetadata{Marks: provider.Marks{
		Managed: md.Managed == provider.MarkManagedValue, UID: md.UID, Installation: md.Installation,
	}}
	out.ServingReport = md.ServingReport == servingReportFile
	if md.CreatedAt != "" {
		if t, err := time.Parse(time.RFC3339, md.CreatedAt); err == nil {
			out.CreatedAt = t
		}
	}
	return out, nil
}
