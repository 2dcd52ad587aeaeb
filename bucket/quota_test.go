package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
)

// TestDayRate: a bucket refilled per day (N/day) counts like any other,
// in both stores: 100/day refills one token every 864 s.
func TestDayRate(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			req := bucket.Request{Limits: []bucket.Limit{{Key: p + "{account:a}:b:daily", Burst: 100, Rate: 100, Period: 24 * time.Hour}}}
			runSteps(t, s, req, []step{
				{cost: 99, allowed: true, remaining: []float64{1}, reset: []time.Duration{99 * 864 * time.Second}},
				{cost: 1, allowed: true, remaining: []float64{0}, reset: []time.Duration{24 * time.Hour}},
				{cost: 1, allowed: false, remaining: []float64{0}, retry: []time.Duration{864 * time.Second}},
				{at: 864 * time.Second, cost: 1, allowed: true, remaining: []float64{0}},
			})
		})
	}
}

// monday is a Monday 22:00 UTC, two hours before a leap day.
var monday = time.Date(2028, 2, 28, 22, 0, 0, 0, time.UTC)

// runStepsAt is runSteps on a timeline starting at base (reset since base).
func runStepsAt(t *testing.T, s bucket.Store, req bucket.Request, base time.Time, steps []step) {
	t.Helper()
	var res bucket.Result
	for i, st := range steps {
		req.Now, req.Cost = base.Add(st.at), st.cost
		if err := s.Decide(context.Background(), &req, &res); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Allowed != st.allowed {
			t.Fatalf("step %d at %v: allowed = %v, want %v (%+v)", i, st.at, res.Allowed, st.allowed, res.Limits)
		}
		for j, want := range st.remaining {
			if got := res.Limits[j].Remaining; got != want {
				t.Errorf("step %d limit %d: remaining = %v, want %v", i, j, got, want)
			}
		}
		for j, want := range st.retry {
			if got := res.Limits[j].RetryAfter; got != want {
				t.Errorf("step %d limit %d: retry = %v, want %v", i, j, got, want)
			}
		}
		for j, want := range st.reset {
			if got := res.Limits[j].Reset.Sub(base); got != want {
				t.Errorf("step %d limit %d: reset = base+%v, want base+%v", i, j, got, want)
			}
		}
	}
}

// TestCalendarBounds: UTC days, weeks from Monday and months, leap years
// (2000 and 2028, not 2100) and year ends.
func TestCalendarBounds(t *testing.T) {
	t.Parallel()
	d := func(y int, m time.Month, day, h int) time.Time { return time.Date(y, m, day, h, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		c          bucket.Calendar
		at         time.Time
		start, end time.Time
	}{
		{bucket.Day, d(2028, 2, 28, 22), d(2028, 2, 28, 0), d(2028, 2, 29, 0)},
		{bucket.Day, d(2028, 2, 29, 0), d(2028, 2, 29, 0), d(2028, 3, 1, 0)},
		{bucket.Week, d(2028, 2, 28, 22), d(2028, 2, 28, 0), d(2028, 3, 6, 0)},
		{bucket.Week, d(2028, 3, 5, 23), d(2028, 2, 28, 0), d(2028, 3, 6, 0)}, // a Sunday
		{bucket.Week, d(2027, 1, 1, 5), d(2026, 12, 28, 0), d(2027, 1, 4, 0)},
		{bucket.Month, d(2028, 2, 28, 22), d(2028, 2, 1, 0), d(2028, 3, 1, 0)},
		{bucket.Month, d(2100, 2, 10, 0), d(2100, 2, 1, 0), d(2100, 3, 1, 0)},
		{bucket.Month, d(2000, 2, 29, 23), d(2000, 2, 1, 0), d(2000, 3, 1, 0)},
		{bucket.Month, d(2026, 12, 31, 23), d(2026, 12, 1, 0), d(2027, 1, 1, 0)},
		{bucket.Month, d(2026, 4, 30, 1).In(time.FixedZone("UTC+5", 5*3600)), d(2026, 4, 1, 0), d(2026, 5, 1, 0)},
	} {
		s, e := tc.c.Bounds(tc.at)
		if !s.Equal(tc.start) || !e.Equal(tc.end) {
			t.Errorf("%v at %v: [%v, %v), want [%v, %v)", tc.c, tc.at, s, e, tc.start, tc.end)
		}
	}
}

// TestQuota: a calendar quota counts per UTC period in both stores, resets
// at the next period's start (its reset and its wait), and is decided
// all-or-nothing with a bucket.
func TestQuota(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			q := func(name string, c bucket.Calendar, n float64) bucket.Limit {
				return bucket.Limit{Key: p + "{account:a}:b:" + name, Kind: bucket.KindQuota, Calendar: c, Burst: n}
			}
			req := bucket.Request{Limits: []bucket.Limit{q("day", bucket.Day, 3), q("week", bucket.Week, 5), q("month", bucket.Month, 100)}}
			const h = time.Hour
			runStepsAt(t, s, req, monday, []step{
				{cost: 1, allowed: true, remaining: []float64{2, 4, 99}, reset: []time.Duration{2 * h, 6*24*h + 2*h, 26 * h}},
				{cost: 0, allowed: true, remaining: []float64{2, 4, 99}},
				{at: h, cost: 2, allowed: true, remaining: []float64{0, 2, 97}},
				// the day is spent: nothing is counted, the wait is the next day
				{at: h, cost: 1, allowed: false, remaining: []float64{0, 2, 97}, retry: []time.Duration{h, 0, 0}},
				// the leap day: a new day, the same week and month
				{at: 2 * h, cost: 2, allowed: true, remaining: []float64{1, 0, 95}, reset: []time.Duration{26 * h, 6*24*h + 2*h, 26 * h}},
				{at: 3 * h, cost: 1, allowed: false, remaining: []float64{1, 0, 95}, retry: []time.Duration{0, 6*24*h - h, 0}},
				// March: a new month of 31 days, still the week
				{at: 26 * h, cost: 0, allowed: true, remaining: []float64{3, 0, 100}, reset: []time.Duration{50 * h, 6*24*h + 2*h, 26*h + 31*24*h}},
				// the next Monday: every count starts again
				{at: 6*24*h + 2*h, cost: 1, allowed: true, remaining: []float64{2, 4, 99}},
				// more than a period holds can never pass
				{at: 6*24*h + 2*h, cost: 4, allowed: false, retry: []time.Duration{time.Hour, 0, 0}},
			})
			// all-or-nothing: a bucket that denies leaves the quota's count alone
			both := bucket.Request{Limits: []bucket.Limit{q("aon", bucket.Month, 10), {Key: p + "{account:a}:b:aon-b", Burst: 1, Rate: 1, Period: h}}}
			runStepsAt(t, s, both, monday, []step{
				{cost: 1, allowed: true, remaining: []float64{9, 0}},
				{cost: 1, allowed: false, remaining: []float64{9, 0}},
				{at: h, cost: 1, allowed: true, remaining: []float64{8, 0}},
			})
		})
	}
}

// TestQuotaMultiplier: a subject's multiplier scales a quota's count per
// period, and a quota counts what was used when the multiplier changes.
func TestQuotaMultiplier(t *testing.T) {
	t.Parallel()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s, p := sc.new(t)
			ctx := context.Background()
			sub := bucket.Subject{Kind: "account", ID: "m"}
			req := bucket.Request{Subjects: []bucket.RequestSubject{{Key: bucket.MultiplierKey(p, "account", "m"), Static: 1, Unverified: 1}},
				Limits: []bucket.Limit{{Key: p + "{account:m}:b:q", Kind: bucket.KindQuota, Calendar: bucket.Day, Burst: 10, Subjects: 1}}}
			runStepsAt(t, s, req, monday, []step{{cost: 4, allowed: true, remaining: []float64{6}}})
			if err := s.SetMultiplier(ctx, sub, bucket.Multiplier{Source: "admin", Value: 0.3, ExpiresAt: monday.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			// 3 a day now, 4 used: none left, and the wait is the penalty's end
			runStepsAt(t, s, req, monday, []step{
				{cost: 1, allowed: false, remaining: []float64{0}, retry: []time.Duration{2 * time.Hour}},
				{at: time.Hour, cost: 1, allowed: true, remaining: []float64{5}},
			})
		})
	}
}
