package console

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Window is the span of the overview's decision counts.
const Window = 15 * time.Minute

// results are the decision results of tollgate_decisions_total, in the
// order the overview shows them.
var results = []string{"allowed", "limited", "locked", "step_up", "unavailable", "degraded", "shadow_limited"}

// denied are the results that refused a request.
var denied = map[string]bool{"limited": true, "locked": true, "step_up": true, "unavailable": true}

// Counters keeps a small ring of per-minute samples of the limiter's own
// decision counter (tollgate_decisions_total), so the overview shows the
// decisions per result and the most denied limits of the last 15 minutes
// without Prometheus. Sample it once a minute (Run does). Safe for
// concurrent use.
type Counters struct {
	g    prometheus.Gatherer
	mu   sync.Mutex
	ring []sample // oldest first, one per minute, at most Window/minute + 1
}

// sample is the counter's totals at the start of a minute.
type sample struct {
	minute  time.Time
	results map[string]float64 // by result
	denied  map[string]float64 // denials by limit
}

// NewCounters returns Counters over g (the limiter's registry).
func NewCounters(g prometheus.Gatherer) *Counters { return &Counters{g: g} }

// Run samples now and at every minute until ctx ends.
func (c *Counters) Run(ctx context.Context) error {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		_ = c.Sample(time.Now()) // a registry that cannot be gathered leaves a gap
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample records the totals at now's minute (replacing a sample of the
// same minute) and forgets samples older than the window.
func (c *Counters) Sample(now time.Time) error {
	s, err := c.read()
	if err != nil {
		return err
	}
	s.minute = now.UTC().Truncate(time.Minute)
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.ring); n > 0 && !c.ring[n-1].minute.Before(s.minute) {
		c.ring = c.ring[:n-1]
	}
	c.ring = append(c.ring, s)
	for len(c.ring) > 0 && c.ring[0].minute.Before(s.minute.Add(-Window)) {
		c.ring = c.ring[1:]
	}
	return nil
}

// read gathers the decision counter's totals.
func (c *Counters) read() (sample, error) {
	s := sample{results: map[string]float64{}, denied: map[string]float64{}}
	mfs, err := c.g.Gather()
	if err != nil {
		return s, fmt.Errorf("console: gather metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var limit, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "limit":
					limit = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			v := m.GetCounter().GetValue()
			s.results[result] += v
			if denied[result] {
				s.denied[limit] += v
			}
		}
	}
	return s, nil
}

// Count is a number of decisions of one result or limit.
type Count struct {
	Name  string
	Value int64
}

// Minute is the decisions of one minute: allowed and denied.
type Minute struct {
	At              time.Time
	Allowed, Denied int64
}

// Summary is the decisions of the window ending now.
type Summary struct {
	// Since is where the counts start: the oldest sample within the
	// window (the limiter's start when it is younger than the window).
	Since time.Time
	// Results are the decisions per result, every result listed.
	Results []Count
	// Total is every decision; Denied those refused.
	Total, Denied int64
	// Minutes are per minute, oldest first, the current one last.
	Minutes []Minute
	// TopDenied are the limits with the most denials, most first (at most 5).
	TopDenied []Count
}

// Summary returns the decisions of the last Window at now: the totals
// now less the oldest sample within the window.
func (c *Counters) Summary(now time.Time) (Summary, error) {
	cur, err := c.read()
	if err != nil {
		return Summary{}, err
	}
	cur.minute = now.UTC()
	c.mu.Lock()
	var ring []sample
	for _, s := range c.ring {
		if !s.minute.Before(now.UTC().Add(-Window)) && !s.minute.After(now) {
			ring = append(ring, s)
		}
	}
	c.mu.Unlock()
	base := sample{minute: now.UTC().Add(-Window), results: map[string]float64{}, denied: map[string]float64{}}
	if len(ring) > 0 {
		base = ring[0]
	}
	out := Summary{Since: base.minute}
	for _, r := range results {
		v := int64(cur.results[r] - base.results[r])
		out.Results = append(out.Results, Count{Name: r, Value: v})
		out.Total += v
		if denied[r] {
			out.Denied += v
		}
	}
	for limit, v := range cur.denied {
		if n := int64(v - base.denied[limit]); n > 0 {
			out.TopDenied = append(out.TopDenied, Count{Name: limit, Value: n})
		}
	}
	sort.Slice(out.TopDenied, func(i, j int) bool {
		a, b := out.TopDenied[i], out.TopDenied[j]
		return a.Value > b.Value || a.Value == b.Value && a.Name < b.Name
	})
	out.TopDenied = out.TopDenied[:min(len(out.TopDenied), 5)]
	ring = append(ring, cur)
	for i := 1; i < len(ring); i++ {
		a, b := ring[i-1], ring[i]
		m := Minute{At: a.minute, Allowed: int64(b.results["allowed"] - a.results["allowed"])}
		for r := range denied {
			m.Denied += int64(b.results[r] - a.results[r])
		}
		out.Minutes = append(out.Minutes, m)
	}
	return out, nil
}
