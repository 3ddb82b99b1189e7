package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

// report prints the figures as `key: value` lines on stdout, as they come.
type report struct {
	mu  sync.Mutex
	out io.Writer
}

func newReport() *report { return &report{out: os.Stdout} }

func (r *report) put(key, value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.out, "%s: %s\n", key, value)
}

func (r *report) seconds(key string, d time.Duration) {
	r.put(key, strconv.FormatFloat(d.Seconds(), 'f', 2, 64))
}

func (r *report) float(key string, v float64) { r.put(key, strconv.FormatFloat(v, 'f', 2, 64)) }

// phases are the two times a side of the comparison took, and the writes
// the API server took in each (every client's: the operator's, the
// provider's, the stand-in kubelet's, the bench's own).
type phases struct {
	create, delete             time.Duration
	createWrites, deleteWrites float64
}

// ratios prints operator/floor for both phases: the figure that survives a
// noisy machine, since the floor ran on it just before. Beside each, the
// API server's write rate in the phase, the operator's over the floor's:
// near 1, the operator kept the API server as busy with writes as the
// floor's client did, and the time ratio is the ratio of writes per Proxy.
func (r *report) ratios(provider string, floor, op phases) {
	r.float(provider+".create_ratio_to_floor", ratio(op.create, floor.create))
	r.float(provider+".delete_ratio_to_floor", ratio(op.delete, floor.delete))
	for _, ph := range []struct {
		name              string
		opW, floorW       float64
		opTime, floorTime time.Duration
	}{
		{"create", op.createWrites, floor.createWrites, op.create, floor.create},
		{"delete", op.deleteWrites, floor.deleteWrites, op.delete, floor.delete},
	} {
		opRate, floorRate := perSecond(ph.opW, ph.opTime), perSecond(ph.floorW, ph.floorTime)
		r.float(provider+".floor_"+ph.name+"_writes_per_second", floorRate)
		r.float(provider+"."+ph.name+"_writes_per_second", opRate)
		r.float(provider+"."+ph.name+"_write_rate_to_floor", opRate/floorRate)
	}
}

func perSecond(n float64, d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return n / d.Seconds()
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return a.Seconds() / b.Seconds()
}

// percentile is the nearest-rank percentile p (0-100] of ds; ds is sorted
// in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[max(rank, 1)-1]
}

// latencies prints p50, p90, p99 and max of ds under prefix.
func (r *report) latencies(prefix string, ds []time.Duration) {
	for _, p := range []float64{50, 90, 99} {
		r.seconds(fmt.Sprintf("%s_p%d_seconds", prefix, int(p)), percentile(ds, p))
	}
	r.seconds(prefix+"_max_seconds", percentile(ds, 100))
}
