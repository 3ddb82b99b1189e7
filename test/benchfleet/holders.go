package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// The heap by holder: a heap profile's in-use bytes, each sample given to
// the first frame from its allocation site up that names what keeps it.
// Informers decode on their watch's goroutine, which names no informer,
// but the decoder names the type: the provider's Pods (protobuf, then
// slimmed) and its other kinds as metadata are told apart from the Proxy
// informer's objects (JSON, the only kind of the operator's own API held
// in quantity); the local provider's instances are "other". Indexes and
// store maps are their own holders: no frame says whose they are.

// holderRule gives the samples whose frame's function name contains
// frame to holder.
type holderRule struct{ frame, holder string }

const (
	holderProviderCache   = "the provider's cache (Pods slimmed, the rest as metadata; protobuf-decoded)"
	holderIndexes         = "informer indexes (the provider's owner index, namespace indexes)"
	holderStores          = "informer stores' maps"
	holderProxies         = "the Proxy informer (objects decoded from JSON)"
	holderControllerCache = "controller-runtime cache (keys, copies)"
	holderWorkQueue       = "work queues"
	holderEvents          = "event broadcaster"
	holderReconcilers     = "reconcilers' own state"
	holderInit            = "package init (API schemes, cloud SDK descriptors)"
	holderOther           = "other"
)

var holderRules = []holderRule{
	{"internal/provider/kubernetes.slimPod", holderProviderCache},
	{"internal/provider/kubernetes.compactMeta", holderProviderCache},
	{"k8s.io/api/core/v1.(*Pod).Unmarshal", holderProviderCache},
	{"meta/v1.(*PartialObjectMetadata).Unmarshal", holderProviderCache},
	// The decoded object's own struct: made before any Unmarshal frame.
	{"k8s.io/apimachinery/pkg/runtime/serializer/protobuf", holderProviderCache},
	{"k8s.io/client-go/tools/cache.(*storeIndex)", holderIndexes},
	{"internal/provider/kubernetes.(*ownerIndex)", holderIndexes},
	{"k8s.io/client-go/tools/cache.(*threadSafeMap)", holderStores},
	{"sigs.k8s.io/json", holderProxies},
	{"k8s.io/apimachinery/pkg/runtime/serializer/json", holderProxies},
	{"sigs.k8s.io/controller-runtime/pkg/cache", holderControllerCache},
	{"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue", holderWorkQueue},
	{"k8s.io/client-go/util/workqueue", holderWorkQueue},
	{"k8s.io/client-go/tools/record", holderEvents},
	{"k8s.io/client-go/tools/events", holderEvents},
	{"egress-proxies-operator/internal/controller", holderReconcilers},
	{"runtime.doInit", holderInit},
}

// holderOf is the holder of a sample whose stack, leaf first, is fns.
func holderOf(fns []string) string {
	for _, fn := range fns {
		for _, r := range holderRules {
			if strings.Contains(fn, r.frame) {
				return r.holder
			}
		}
	}
	return holderOther
}

// heapByHolder sums a heap profile's inuse_space by holder.
func heapByHolder(raw []byte) (map[string]int64, error) {
	p, err := profile.ParseData(raw)
	if err != nil {
		return nil, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("the profile has no inuse_space")
	}
	out := map[string]int64{}
	for _, s := range p.Sample {
		var fns []string
		for _, loc := range s.Location {
			// A location's lines are innermost first (inlined calls).
			for _, l := range loc.Line {
				if l.Function != nil {
					fns = append(fns, l.Function.Name)
				}
			}
		}
		out[holderOf(fns)] += s.Value[idx]
	}
	return out, nil
}

// formatHolders is "holder 12.3 MiB, ..." by size, largest first.
func formatHolders(by map[string]int64) string {
	names := make([]string, 0, len(by))
	for h := range by {
		names = append(names, h)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]] > by[names[j]] })
	parts := make([]string, len(names))
	for i, h := range names {
		parts[i] = fmt.Sprintf("%s %.1f MiB", h, float64(by[h])/(1<<20))
	}
	return strings.Join(parts, ", ")
}
