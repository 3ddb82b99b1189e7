package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// TestHeapByHolder: samples go to the holder of the first frame from the
// allocation site up that names one (a Pod's ObjectMeta to the provider's
// Pods, not to the watch that decoded it); the rest is "other"; the
// summary lists holders largest first.
func TestHeapByHolder(t *testing.T) {
	fns := map[string]*profile.Function{}
	var locs []*profile.Location
	loc := func(names ...string) *profile.Location {
		l := &profile.Location{ID: uint64(len(locs) + 1)}
		locs = append(locs, l)
		for _, n := range names {
			f, ok := fns[n]
			if !ok {
				f = &profile.Function{ID: uint64(len(fns) + 1), Name: n}
				fns[n] = f
			}
			l.Line = append(l.Line, profile.Line{Function: f})
		}
		return l
	}
	watch := loc("k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive")
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}, {Type: "inuse_space", Unit: "bytes"}},
		Sample: []*profile.Sample{
			{Value: []int64{999, 300}, Location: []*profile.Location{
				loc("k8s.io/apimachinery/pkg/apis/meta/v1.(*ObjectMeta).Unmarshal"), loc("k8s.io/api/core/v1.(*Pod).Unmarshal"), watch}},
			{Value: []int64{999, 500}, Location: []*profile.Location{
				// Inlined: the index's insert, then its caller, in one location.
				loc("k8s.io/apimachinery/pkg/util/sets.Set[...].Insert", "k8s.io/client-go/tools/cache.(*storeIndex).addKeyToIndex"), watch}},
			{Value: []int64{999, 200}, Location: []*profile.Location{
				loc("reflect.unsafe_New"), loc("sigs.k8s.io/json/internal/golang/encoding/json.(*decodeState).object"), watch}},
			{Value: []int64{999, 100}, Location: []*profile.Location{loc("main.somethingElse")}},
		},
	}
	for _, f := range fns {
		p.Function = append(p.Function, f)
	}
	p.Location = locs
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	by, err := heapByHolder(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{holderProviderCache: 300, holderIndexes: 500, holderProxies: 200, holderOther: 100}
	if len(by) != len(want) {
		t.Errorf("holders %v, want %v", by, want)
	}
	for h, v := range want {
		if by[h] != v {
			t.Errorf("%s: %d bytes, want %d (all: %v)", h, by[h], v, by)
		}
	}
	if got := formatHolders(by); !strings.HasPrefix(got, holderIndexes+" 0.0 MiB, "+holderProviderCache) {
		t.Errorf("summary %q, want the largest first", got)
	}
}
