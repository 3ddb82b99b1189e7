package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
)

// writeVerbs are the verbs of apiserver_request_total that change
// something.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// readVerbs are the verbs that read: counted apart, since a client-side
// rate limit spends its budget on them too.
var readVerbs = map[string]bool{"GET": true, "LIST": true}

// reviews are POSTs that ask the API server a question (may I?) and store
// nothing; they are counted apart from the writes.
var reviews = map[string]bool{"selfsubjectaccessreviews": true, "subjectaccessreviews": true, "selfsubjectrulesreviews": true, "tokenreviews": true, "localsubjectaccessreviews": true}

// split parts the counts into writes, reviews and reads.
func (c writeCounts) split() (writes, asks, reads writeCounts) {
	writes, asks, reads = writeCounts{}, writeCounts{}, writeCounts{}
	for k, v := range c {
		switch {
		case readVerbs[k.verb]:
			reads[k] = v
		case reviews[k.resource]:
			asks[k] = v
		default:
			writes[k] = v
		}
	}
	return writes, asks, reads
}

// writeKey is one kind of write: "PATCH proxies/status".
type writeKey struct{ verb, resource string }

func (k writeKey) String() string { return k.verb + " " + k.resource }

// writeCounts are the API server's write (and read) counters at one moment, summed
// over response codes and API versions.
type writeCounts map[writeKey]float64

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scraper reads the API server's own /metrics as the admin user, so the
// counts are the server's, whoever the clients were.
type scraper struct {
	hc   *http.Client
	host string
}

func newScraper(cfg *rest.Config) (*scraper, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &scraper{hc: hc, host: strings.TrimSuffix(cfg.Host, "/")}, nil
}

func (s *scraper) scrape(ctx context.Context) (writeCounts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.host+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping the API server's /metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping the API server's /metrics: %s", resp.Status)
	}
	return parseWrites(bufio.NewScanner(resp.Body))
}

// parseWrites sums apiserver_request_total's write verbs by verb and
// resource[/subresource].
func parseWrites(sc *bufio.Scanner) (writeCounts, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	out := writeCounts{}
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("apiserver_request_total value in %q: %w", line, err)
		}
		labels := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(line[:end], -1) {
			labels[m[1]] = m[2]
		}
		if !writeVerbs[labels["verb"]] && !readVerbs[labels["verb"]] {
			continue
		}
		res := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[writeKey{labels["verb"], res}] += v
	}
	return out, sc.Err()
}

// minus is c - before, leaving out what did not change.
func (c writeCounts) minus(before writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// without leaves out the writes of one kind (the stand-in kubelet's).
func (c writeCounts) without(keys ...writeKey) writeCounts {
	out := writeCounts{}
	for k, v := range c {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

func (c writeCounts) total() float64 {
	t := 0.0
	for _, v := range c {
		t += v
	}
	return t
}

// perObject renders the counts divided by n, biggest first:
// "POST events 2.00, PATCH proxies/status 2.00".
func (c writeCounts) perObject(n int) string {
	keys := make([]writeKey, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c[keys[i]] != c[keys[j]] {
			return c[keys[i]] > c[keys[j]]
		}
		return keys[i].String() < keys[j].String()
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, c[k]/float64(n)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
