package fakecompute

import (
	"hash/fnv"
	"sort"
	"strings"
)

// Catalogue is what exists in the fake before any call: the projects, the
// regions with their zones, the machine types (offered in every zone), the
// images (by path) and the networks (in every project, each with a
// subnetwork of its name in every region, as an auto-mode network has).
// A request naming anything else meets the API's answer for it.
type Catalogue struct {
	Projects     []string
	Regions      map[string][]string // region -> zone names
	MachineTypes map[string]MachineType
	// Images are "projects/<p>/global/images/<name>" or
	// "projects/<p>/global/images/family/<family>".
	Images   []string
	Networks []string
}

// MachineType is what the fake needs to know of one: the vCPUs it takes
// from the regional CPUS quota.
type MachineType struct {
	CPUs     int
	MemoryMB int
}

// DefaultCatalogue has project "proj-1", three regions, the common small
// machine types, the public images a proxy VM is built from, and the
// "default" network.
func DefaultCatalogue() Catalogue {
	return Catalogue{
		Projects: []string{"proj-1"},
		Regions: map[string][]string{
			"us-central1":  {"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"},
			"us-east1":     {"us-east1-b", "us-east1-c", "us-east1-d"},
			"europe-west1": {"europe-west1-b", "europe-west1-c", "europe-west1-d"},
		},
		MachineTypes: map[string]MachineType{
			"e2-micro":      {CPUs: 2, MemoryMB: 1024},
			"e2-small":      {CPUs: 2, MemoryMB: 2048},
			"e2-medium":     {CPUs: 2, MemoryMB: 4096},
			"e2-standard-2": {CPUs: 2, MemoryMB: 8192},
			"e2-standard-4": {CPUs: 4, MemoryMB: 16384},
			"n1-standard-1": {CPUs: 1, MemoryMB: 3840},
			"n2-standard-2": {CPUs: 2, MemoryMB: 8192},
		},
		Images: []string{
			"projects/debian-cloud/global/images/family/debian-12",
			"projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts",
			"projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64",
			"projects/cos-cloud/global/images/family/cos-stable",
		},
		Networks: []string{"default"},
	}
}

func (c Catalogue) clone() Catalogue {
	n := Catalogue{
		Projects:     append([]string(nil), c.Projects...),
		Regions:      map[string][]string{},
		MachineTypes: map[string]MachineType{},
		Images:       append([]string(nil), c.Images...),
		Networks:     append([]string(nil), c.Networks...),
	}
	for r, zs := range c.Regions {
		n.Regions[r] = append([]string(nil), zs...)
	}
	for k, v := range c.MachineTypes {
		n.MachineTypes[k] = v
	}
	return n
}

// index is the catalogue in the forms the handlers look things up by.
type index struct {
	cat        Catalogue
	projects   map[string]uint64 // id -> project number
	zoneRegion map[string]string
	zones      []string // sorted
	regions    []string // sorted
	images     map[string]bool
	networks   map[string]bool
}

func newIndex(c Catalogue) *index {
	ix := &index{cat: c, projects: map[string]uint64{}, zoneRegion: map[string]string{},
		images: map[string]bool{}, networks: map[string]bool{}}
	for _, p := range c.Projects {
		ix.projects[p] = projectNumber(p)
	}
	for r, zs := range c.Regions {
		ix.regions = append(ix.regions, r)
		for _, z := range zs {
			ix.zoneRegion[z] = r
			ix.zones = append(ix.zones, z)
		}
	}
	sort.Strings(ix.zones)
	sort.Strings(ix.regions)
	for _, i := range c.Images {
		ix.images[i] = true
	}
	for _, n := range c.Networks {
		ix.networks[n] = true
	}
	return ix
}

// projectNumber is a stable 12-digit number for a project id.
func projectNumber(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return 100000000000 + h.Sum64()%900000000000
}

// resourcePath turns the forms a request may use for a resource (a full URL
// on www.googleapis.com or compute.googleapis.com, "projects/...", or a
// path relative to the project such as "zones/z/machineTypes/t") into
// "projects/<p>/..."; ok is false for anything else.
func resourcePath(project, ref string) (string, bool) {
	for _, prefix := range []string{
		"https://www.googleapis.com/compute/v1/", "https://compute.googleapis.com/compute/v1/",
		"http://www.googleapis.com/compute/v1/", "www.googleapis.com/compute/v1/",
		"compute.googleapis.com/compute/v1/",
	} {
		if strings.HasPrefix(ref, prefix) {
			ref = strings.TrimPrefix(ref, prefix)
			break
		}
	}
	ref = strings.TrimPrefix(ref, "/")
	switch {
	case strings.HasPrefix(ref, "projects/"):
		return ref, true
	case strings.HasPrefix(ref, "zones/"), strings.HasPrefix(ref, "global/"), strings.HasPrefix(ref, "regions/"):
		return "projects/" + project + "/" + ref, true
	}
	return "", false
}
