package main

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

// report prints the figures as `key: value` lines on stdout, as they come.
type report struct{ mu sync.Mutex }

func newReport() *report { return &report{} }

func (r *report) put(key, value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(os.Stdout, "%s: %s\n", key, value)
}

func (r *report) seconds(key string, d time.Duration) {
	r.put(key, strconv.FormatFloat(d.Seconds(), 'f', 2, 64))
}

func (r *report) float(key string, v float64) { r.put(key, strconv.FormatFloat(v, 'f', 2, 64)) }

// phases are the two times a side of the comparison took.
type phases struct{ create, delete time.Duration }

// ratios prints operator/floor for both phases: the figure that survives a
// noisy machine, since the floor ran on it just before.
func (r *report) ratios(provider string, floor, op phases) {
	r.float(provider+".create_ratio_to_floor", ratio(op.create, floor.create))
	r.float(provider+".delete_ratio_to_floor", ratio(op.delete, floor.delete))
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
