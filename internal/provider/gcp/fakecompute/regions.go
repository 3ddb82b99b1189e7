package fakecompute

import (
	"fmt"
	"hash/fnv"
	"net/http"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// defaultProjectQuota are project-wide metrics regions.get does not carry
// (the limits of a new project, after GoogleCloudPlatform/professional-services#466).
var defaultProjectQuota = map[string]float64{
	"SNAPSHOTS": 5000, "NETWORKS": 15, "FIREWALLS": 200, "IMAGES": 2000, "STATIC_ADDRESSES": 8,
	"ROUTES": 250, "CPUS_ALL_REGIONS": 32, "INSTANCE_TEMPLATES": 100,
}

var projectQuotaOrder = []string{"SNAPSHOTS", "NETWORKS", "FIREWALLS", "IMAGES", "STATIC_ADDRESSES", "ROUTES",
	"CPUS_ALL_REGIONS", "INSTANCE_TEMPLATES"}

// The API gives regions and zones the creation time of the epoch in
// Pacific time ('1969-12-31T16:00:00.000-08:00', gcloud output in
// GoogleCloudPlatform/pubsec-declarative-toolkit#590) and small ids.
const epochTimestamp = "1969-12-31T16:00:00.000-08:00"

func smallID(name string) uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return 1000 + uint64(h.Sum32()%9000)
}

// getRegion is regions.get, with the regional quotas: limits from the
// knobs (defaults of a new project), usage from the instances.
func (s *Server) getRegion(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	region := r.PathValue("region")
	_, ok := s.ix.cat.Regions[region]
	if !ok {
		writeAPIError(w, NotFound(fmt.Sprintf("projects/%s/regions/%s", p.id, region)))
		return
	}
	resp := &computepb.Region{
		Kind: proto.String("compute#region"), Id: proto.Uint64(smallID(region)),
		CreationTimestamp: proto.String(epochTimestamp), Name: proto.String(region),
		Description: proto.String(region), Status: proto.String("UP"),
		SelfLink: proto.String(link("projects", p.id, "regions", region)), SupportsPzs: proto.Bool(false),
	}
	for _, z := range s.ix.zones {
		if s.ix.zoneRegion[z] == region {
			resp.Zones = append(resp.Zones, link("projects", p.id, "zones", z))
		}
	}
	for _, m := range regionQuotaOrder {
		resp.Quotas = append(resp.Quotas, &computepb.Quota{Metric: proto.String(m),
			Limit: proto.Float64(s.regionLimit(region, m)), Usage: proto.Float64(s.regionUsage(p, region, m))})
	}
	writeProto(w, resp)
}

// getZone is zones.get.
func (s *Server) getZone(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	zone := r.PathValue("zone")
	region, ok := s.ix.zoneRegion[zone]
	if !ok {
		writeAPIError(w, NotFound(fmt.Sprintf("projects/%s/zones/%s", p.id, zone)))
		return
	}
	writeProto(w, &computepb.Zone{
		Kind: proto.String("compute#zone"), Id: proto.Uint64(smallID(zone)),
		CreationTimestamp: proto.String(epochTimestamp), Name: proto.String(zone),
		Description: proto.String(zone), Status: proto.String("UP"),
		Region:   proto.String(link("projects", p.id, "regions", region)),
		SelfLink: proto.String(link("projects", p.id, "zones", zone)),
	})
}

// getProject is projects.get: the cheap authenticated call, with the
// project-wide quotas.
func (s *Server) getProject(w http.ResponseWriter, r *http.Request) {
	p := s.project(w, r)
	if p == nil {
		return
	}
	resp := &computepb.Project{
		Kind: proto.String("compute#project"), Id: proto.Uint64(p.number), Name: proto.String(p.id),
		CreationTimestamp: proto.String(p.created), SelfLink: proto.String(link("projects", p.id)),
		CommonInstanceMetadata: &computepb.Metadata{Kind: proto.String("compute#metadata"),
			Fingerprint: proto.String(fingerprint("project-metadata", p.id))},
		DefaultServiceAccount: proto.String(fmt.Sprintf("%d-compute@developer.gserviceaccount.com", p.number)),
		DefaultNetworkTier:    proto.String("PREMIUM"),
		XpnProjectStatus:      proto.String("UNSPECIFIED_XPN_PROJECT_STATUS"),
	}
	for _, m := range projectQuotaOrder {
		var usage float64
		switch m {
		case "FIREWALLS":
			usage = float64(len(p.firewalls))
		case "NETWORKS":
			usage = float64(len(s.ix.cat.Networks))
		case "CPUS_ALL_REGIONS":
			for _, reg := range s.ix.regions {
				usage += s.regionUsage(p, reg, "CPUS")
			}
		}
		resp.Quotas = append(resp.Quotas, &computepb.Quota{Metric: proto.String(m),
			Limit: proto.Float64(s.projectLimit(m)), Usage: proto.Float64(usage)})
	}
	writeProto(w, resp)
}
