package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// goMemoryShare is the part of the container's memory limit the Go runtime
// aims to stay under. The rest is memory the runtime does not count but the
// container's limit does: the binary's mapped pages and the allocator's
// unreturned spans, about 40 MiB at 10,000 Proxies (docs/performance.md).
// A runtime limit equal to the container's let the peak RSS run 10% over it.
const goMemoryShare = 0.8

// goMemoryLimit is the Go runtime's soft memory limit, in bytes, for the
// container limit in MEMORY_LIMIT (the downward API's limits.memory, bytes,
// or any Kubernetes quantity; without a limit on the container, the node's
// allocatable memory); 0 leaves the runtime's own. An explicit
// GOMEMLIMIT wins: the runtime read it already.
func goMemoryLimit(gomemlimit, containerLimit string) (int64, error) {
	if gomemlimit != "" || containerLimit == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(containerLimit)
	if err != nil {
		return 0, fmt.Errorf("MEMORY_LIMIT %q: not a quantity (bytes, or e.g. 256Mi)", containerLimit)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return 0, fmt.Errorf("MEMORY_LIMIT %q: want a positive number of bytes", containerLimit)
	}
	return int64(float64(n) * goMemoryShare), nil
}
