package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// goMemoryReserve is the part of the container's memory limit kept out of
// the Go runtime's: memory the container's limit counts and the runtime
// does not, mostly the binary's own mapped pages (68.5 MiB resident at
// 10,000 Proxies, docs/performance.md; 64Mi left the peak 12 MiB over the
// 250 MiB target once the workers were 32). It does not grow with the
// limit, hence a fixed amount rather than a share. With the runtime's
// limit equal to the container's, the peak RSS ran 10% over it.
const goMemoryReserve = 80 << 20

// goMemoryLimit is the Go runtime's soft memory limit, in bytes, for the
// container limit in MEMORY_LIMIT (the downward API's limits.memory, bytes,
// or any Kubernetes quantity; without a limit on the container, the node's
// allocatable memory): the limit less goMemoryReserve, and at least half
// of it for a small container; 0 leaves the runtime's own. An explicit
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
	return max(n-goMemoryReserve, n/2), nil
}
