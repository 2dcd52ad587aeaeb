package signals

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

func anomalyEngine() *Engine {
	return New(Options{Risk: policy.Risk{Anomaly: exampleAnomaly()}})
}

func TestAnomalySpike(t *testing.T) {
	t.Parallel()
	// A device at a steady 1/s, then 100/s: with factor 100 the spike fires
	// when the 10 s window holds 1000 decisions, on the spike's 1000th.
	// The spike may start on any second, not only on a 10 s slot.
	for _, start := range []int{600, 605, 1234} {
		t.Run("spike at "+time.Duration(start*int(time.Second)).String(), func(t *testing.T) {
			t.Parallel()
			e := anomalyEngine()
			for i := range start {
				mustNotFire(t, "steady", e.ApplyDecision(0, 0, decision("d1", sec(float64(i))), nil))
			}
			var fired []int
			var acts []Action
			for k := range 2000 {
				ts := at(time.Duration(start)*time.Second + time.Duration(k)*10*time.Millisecond)
				if got := e.ApplyDecision(0, 0, decision("d1", ts), nil); len(got) > 0 {
					fired = append(fired, k)
					acts = got
				}
			}
			if !equalInts(fired, []int{999}) {
				t.Fatalf("fired at spike decisions %v, want [999] (once, on the 1000th)", fired)
			}
			ts := at(time.Duration(start)*time.Second + 9990*time.Millisecond)
			until := ts.Add(15 * time.Minute)
			wantM := Action{Kind: SetMultiplier, Subject: "device", ID: "d1", Multiplier: bucket.Multiplier{
				Source: "anomaly", Value: 0.05, ExpiresAt: until, Reason: "anomaly: 100/s over 10s, baseline 1/s (factor 100)"}}
			if len(acts) != 2 || !reflect.DeepEqual(acts[0], wantM) {
				t.Fatalf("actions %+v", acts)
			}
			wantA := streams.Alert{
				V:          streams.SchemaVersion,
				ID:         "anomaly:anomaly:device:d1:" + itoa(ts.UnixMilli()),
				TS:         ts,
				Kind:       "anomaly",
				Subject:    "device",
				SubjectID:  "d1",
				Rule:       "anomaly",
				Multiplier: 0.05,
				Rate:       100,
				Baseline:   1,
				ExpiresAt:  until,
				Reason: "device d1: 1000 decisions in the last 10s (100/s), 100 times its baseline of 1/s " +
					"(fires at 100x); limits tightened to x0.05 for 15m",
				Count: 1000,
			}
			if !reflect.DeepEqual(acts[1].Alert, wantA) {
				t.Fatalf("alert:\n got %+v\nwant %+v", acts[1].Alert, wantA)
			}
		})
	}
}

func TestAnomalySteadyNeverFires(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		every time.Duration
		total time.Duration
	}{
		{"1/s for 2h", time.Second, 2 * time.Hour},
		{"4/s for 1h", 250 * time.Millisecond, time.Hour},
		{"one every 7s for a day", 7 * time.Second, 24 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := anomalyEngine()
			for d := time.Duration(0); d < tc.total; d += tc.every {
				mustNotFire(t, "steady at "+d.String(), e.ApplyDecision(0, 0, decision("d1", at(d)), nil))
			}
		})
	}
	t.Run("bursts of 40 every 10s for 1h", func(t *testing.T) {
		t.Parallel()
		e := anomalyEngine()
		for d := time.Duration(0); d < time.Hour; d += 10 * time.Second {
			for i := range 40 {
				ts := d + time.Duration(i)*time.Millisecond
				mustNotFire(t, "burst at "+ts.String(), e.ApplyDecision(0, 0, decision("d1", at(ts)), nil))
			}
		}
	})
	t.Run("a warmed-up device at 50/s", func(t *testing.T) {
		t.Parallel()
		// Ramps up 1/s, 2/s... as its baseline follows: never 100x.
		e := anomalyEngine()
		var d time.Duration
		for rate := 1; rate <= 50; rate++ {
			for end := d + 30*time.Second; d < end; d += time.Second / time.Duration(rate) {
				mustNotFire(t, "at "+d.String(), e.ApplyDecision(0, 0, decision("d1", at(d)), nil))
			}
		}
		for end := d + 30*time.Minute; d < end; d += 20 * time.Millisecond {
			mustNotFire(t, "at "+d.String(), e.ApplyDecision(0, 0, decision("d1", at(d)), nil))
		}
	})
}

func TestAnomalyNewDevice(t *testing.T) {
	t.Parallel()
	// No history: the baseline is min_baseline (0.05/s), so a new device
	// fires at 100 x 0.05 = 5/s over the 10 s window, i.e. 50 decisions.
	tests := []struct {
		name  string
		n     int
		every time.Duration
		fired []int
	}{
		{"49 in a second", 49, 10 * time.Millisecond, nil},
		{"50 in a second", 50, 10 * time.Millisecond, []int{49}},
		{"5/s over 10s", 60, 200 * time.Millisecond, []int{49}},
		{"4/s never", 200, 250 * time.Millisecond, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := anomalyEngine()
			var fired []int
			for i := range tc.n {
				acts := e.ApplyDecision(0, 0, decision("new", at(time.Hour+time.Duration(i)*tc.every)), nil)
				if len(acts) == 0 {
					continue
				}
				fired = append(fired, i)
				a := alerts(acts)[0]
				if a.Rate != 5 || a.Baseline != 0.05 || a.Count != 50 {
					t.Errorf("alert rate %v baseline %v count %v, want 5, 0.05, 50", a.Rate, a.Baseline, a.Count)
				}
			}
			if !equalInts(fired, tc.fired) {
				t.Fatalf("fired at %v, want %v", fired, tc.fired)
			}
		})
	}
}

func TestAnomalyNoRefireWhileInForce(t *testing.T) {
	t.Parallel()
	e := anomalyEngine()
	var fired []time.Duration
	feed := func(from time.Duration, n int) {
		for i := range n {
			ts := from + time.Duration(i)*10*time.Millisecond
			if acts := e.ApplyDecision(0, 0, decision("d1", at(ts)), nil); len(acts) > 0 {
				fired = append(fired, ts)
			}
		}
	}
	feed(0, 50)              // fires on the 50th (new device), measure until 15m0.49s
	feed(time.Minute, 50)    // would fire again: in force
	feed(14*time.Minute, 50) // in force
	feed(2*time.Hour, 50)    // quiet for long: fires again
	want := []time.Duration{490 * time.Millisecond, 2*time.Hour + 490*time.Millisecond}
	if len(fired) != len(want) || fired[0] != want[0] || fired[1] != want[1] {
		t.Fatalf("fired at %v, want %v", fired, want)
	}
}

func TestAnomalyKeys(t *testing.T) {
	t.Parallel()
	a := exampleAnomaly()
	a.By = policy.PartIP
	e := New(Options{Risk: policy.Risk{Anomaly: a}})
	var fired int
	for i := range 100 {
		d := decision("d"+itoa(int64(i)), at(time.Duration(i)*time.Millisecond)) // a new device each time, one ip
		if i%2 == 1 {
			d.Allowed, d.Result = false, "limited" // denials count too
		}
		if acts := e.ApplyDecision(0, 0, d, nil); len(acts) > 0 {
			fired++
			if acts[0].Subject != "ip" || acts[0].ID != "203.0.113.9" {
				t.Fatalf("actions %s", summary(acts))
			}
			if i != 49 {
				t.Fatalf("fired on decision %d, want 49", i)
			}
		}
	}
	if fired != 1 {
		t.Fatalf("fired %d times", fired)
	}
	d := decision("x", at(time.Second))
	d.IP = ""
	e.ApplyDecision(0, 0, d, nil)
	if got := e.Stats().Anomaly; got != 1 {
		t.Fatalf("tracked %d keys, want 1 (a decision without ip is not counted)", got)
	}
}

func TestAnomalyOutOfOrder(t *testing.T) {
	t.Parallel()
	// Late decisions count in their own slot: the 50 of a new device's
	// burst, shuffled within the second, fire on the 50th received.
	e := anomalyEngine()
	var fired []int
	for i := range 50 {
		ms := (i * 37) % 50 // a permutation of 0..49
		if acts := e.ApplyDecision(0, 0, decision("d1", at(time.Hour+time.Duration(ms)*20*time.Millisecond)), nil); len(acts) > 0 {
			fired = append(fired, i)
		}
	}
	if !equalInts(fired, []int{49}) {
		t.Fatalf("fired at %v, want [49]", fired)
	}
	// A decision older than the long window (relative to the key's newest)
	// is dropped; one within it counts for the baseline only.
	e = anomalyEngine()
	e.ApplyDecision(0, 0, decision("d2", at(time.Hour)), nil)
	e.ApplyDecision(0, 0, decision("d2", at(time.Hour-11*time.Minute)), nil)
	e.ApplyDecision(0, 0, decision("d2", at(time.Hour-5*time.Minute)), nil)
	st := &e.anom.peek("d2").val
	if st.coarse.sum != 2 || st.fine.sum != 1 {
		t.Fatalf("coarse %d fine %d, want 2 and 1", st.coarse.sum, st.fine.sum)
	}
}

func TestAnomalyGeometry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		short, long    time.Duration
		fine, coarse   time.Duration
		nFine, nCoarse int
	}{
		{10 * time.Second, 10 * time.Minute, time.Second, 10 * time.Second, 10, 60},
		{time.Minute, time.Hour, time.Second, time.Minute, 60, 60},
		{500 * time.Millisecond, 30 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond, 1, 60},
		{5 * time.Minute, 24 * time.Hour, 5 * time.Second, 24 * time.Minute, 60, 60},
		{59 * time.Second, time.Minute, time.Second, time.Second, 59, 60},
	}
	for _, tc := range tests {
		a := exampleAnomaly()
		a.ShortWindow, a.LongWindow = tc.short, tc.long
		r := compileAnomaly(a)
		if time.Duration(r.fine) != tc.fine || time.Duration(r.coarse) != tc.coarse || r.nFine != tc.nFine || r.nCoarse != tc.nCoarse {
			t.Errorf("%v/%v: fine %v x %d, coarse %v x %d; want %v x %d, %v x %d", tc.short, tc.long,
				time.Duration(r.fine), r.nFine, time.Duration(r.coarse), r.nCoarse, tc.fine, tc.nFine, tc.coarse, tc.nCoarse)
		}
	}
}

func TestRing(t *testing.T) {
	t.Parallel()
	var r ring
	r.init(4)
	check := func(slot int64, ok bool, sum uint64) {
		t.Helper()
		if got := r.add(slot); got != ok || r.sum != sum {
			t.Fatalf("add(%d) = %v, sum %d; want %v, %d", slot, got, r.sum, ok, sum)
		}
	}
	check(10, true, 1)
	check(10, true, 2)
	check(12, true, 3)  // holds (8, 12]
	check(9, true, 4)   // late, still held
	check(8, false, 4)  // recycled
	check(13, true, 4)  // holds (9, 13]: slot 9 recycled
	check(14, true, 3)  // holds (10, 14]: slot 10 (2) recycled
	check(20, true, 1)  // beyond the ring: cleared
	check(-3, false, 1) // far in the past
	if got := r.countTo(20, 1); got != 1 {
		t.Fatalf("countTo(20,1) = %d", got)
	}
	if got := r.countTo(19, 4); got != 0 {
		t.Fatalf("countTo(19,4) = %d", got)
	}
	if got := r.countTo(25, 60); got != 1 {
		t.Fatalf("countTo(25,60) = %d", got)
	}
	if floorDiv(-1, 10) != -1 || floorDiv(-10, 10) != -1 || floorDiv(9, 10) != 0 || slotMod(-1, 4) != 3 {
		t.Fatal("floorDiv/slotMod")
	}
}

// TestRingMatchesModel walks rings of several sizes through random slots
// (negative ones too, jumps forward and back) and checks every add and
// count against a model that keeps each slot's count by its index.
func TestRingMatchesModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(14, 4))
	for _, n := range []int{1, 2, 3, 7, 60} {
		var r ring
		r.init(n)
		model := map[int64]uint64{}
		head, used := int64(0), false
		s := int64(-40)
		for step := range 5000 {
			switch rng.IntN(10) {
			case 0:
				s += int64(rng.IntN(3 * n)) // a jump, maybe past the whole ring
			case 1:
				s -= int64(rng.IntN(n + 2)) // late
			default:
				s += int64(rng.IntN(2))
			}
			want := !used || s > head-int64(n)
			if want {
				if !used || s > head {
					head, used = s, true
				}
				model[s]++
			}
			if got := r.add(s); got != want {
				t.Fatalf("n %d step %d: add(%d) = %v, want %v", n, step, s, got, want)
			}
			var sum uint64
			for i, c := range model {
				if i <= head-int64(n) {
					delete(model, i)
					continue
				}
				sum += c
			}
			if r.sum != sum || r.head != head {
				t.Fatalf("n %d step %d: sum %d head %d, want %d %d", n, step, r.sum, r.head, sum, head)
			}
			to, k := s+int64(rng.IntN(5))-2, int64(rng.IntN(n+3))
			var count uint64
			for i := to - k + 1; i <= to; i++ {
				count += model[i]
			}
			if got := r.countTo(to, k); got != count {
				t.Fatalf("n %d step %d: countTo(%d, %d) = %d, want %d", n, step, to, k, got, count)
			}
		}
	}
}
