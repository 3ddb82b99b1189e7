package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The manager runs with its profiler on loopback (--pprof-bind-address),
// so that what holds its memory at the fleet's full size can be said: the
// bench takes a heap profile once every Proxy is Ready.

// profileTimeout bounds one profile download (a heap profile of 10,000
// Proxies is a few MiB, after a forced GC).
const profileTimeout = time.Minute

// profile prints the manager's heap in use, its goroutine stacks and
// goroutines, and saves its heap and goroutine profiles as
// <dir>/<prefix>.heap.pprof and .goroutine.pprof when --profile-dir is set.
// A failure is a figure, not the run's end.
func (b *bench) profile(ctx context.Context, prefix string) {
	if b.pprofAddr == "" {
		return
	}
	hc := &http.Client{Timeout: profileTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	get := func(path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.pprofAddr+"/debug/pprof/"+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", path, resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	// debug=1 ends with the runtime's MemStats; gc=1 collects first, so
	// the figures are what is live, not what awaits the collector.
	text, err := get("heap?gc=1&debug=1")
	if err != nil {
		b.out.put(prefix+"_heap", "unknown: "+err.Error())
		return
	}
	stats := memStats(string(text))
	b.out.float(prefix+"_heap_inuse_mib", float64(stats["HeapInuse"])/(1<<20))
	b.out.float(prefix+"_stack_inuse_mib", float64(stats["Stack"])/(1<<20))
	b.out.float(prefix+"_sys_mib", float64(stats["Sys"])/(1<<20))
	if g, err := get("goroutine?debug=1"); err == nil {
		first, _, _ := strings.Cut(string(g), "\n")
		b.out.put(prefix+"_goroutines", strings.TrimPrefix(first, "goroutine profile: total "))
	}
	// The heap by holder (holders.go), from the profile's samples: what
	// they cover of the heap in use is printed beside it.
	heap, heapErr := get("heap?gc=1")
	if heapErr == nil {
		if by, err := heapByHolder(heap); err == nil {
			var total int64
			for _, v := range by {
				total += v
			}
			b.out.float(prefix+"_heap_sampled_mib", float64(total)/(1<<20))
			b.out.put(prefix+"_heap_by_holder", formatHolders(by))
		} else {
			b.out.put(prefix+"_heap_by_holder", "unknown: "+err.Error())
		}
	}
	if b.opts.profileDir == "" {
		return
	}
	goroutines, goroutinesErr := get("goroutine")
	for _, p := range []struct {
		name string
		raw  []byte
		err  error
	}{{"heap", heap, heapErr}, {"goroutine", goroutines, goroutinesErr}} {
		err := p.err
		if err == nil {
			err = os.MkdirAll(b.opts.profileDir, 0o700)
		}
		if err == nil {
			path := filepath.Join(b.opts.profileDir, prefix+"."+p.name+".pprof")
			if err = os.WriteFile(path, p.raw, 0o600); err == nil {
				b.out.put(prefix+"_"+p.name+"_profile", path)
				continue
			}
		}
		b.out.put(prefix+"_"+p.name+"_profile", "unknown: "+err.Error())
	}
}

// memStats reads the "# Name = value" lines of a debug=1 heap profile
// (for "# Stack = inuse / sys", the first number).
func memStats(text string) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok || strings.ContainsAny(name, " []") {
			continue
		}
		first, _, _ := strings.Cut(value, " ")
		if v, err := strconv.ParseUint(first, 10, 64); err == nil {
			out[name] = v
		}
	}
	return out
}
