package signals

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// offTally is a repeat offender as TestTopOffendersMatchesFullSort's
// model lists it.
type offTally struct {
	limit, key string
	count      int
}

// compareTally is the documented order: worst first, ties by limit then key.
func compareTally(a, b offTally) int {
	if c := cmp.Compare(b.count, a.count); c != 0 {
		return c
	}
	if c := cmp.Compare(a.limit, b.limit); c != 0 {
		return c
	}
	return strings.Compare(a.key, b.key)
}

// TestTopOffendersMatchesFullSort: on random denials with many ties (few
// distinct counts, and keys shown alike because a part holds "|"),
// Offenders(now) lists exactly the model's offenders in the documented
// order, and TopOffenders(now, k) returns its first k for every k, with
// every offender counted per limit.
func TestTopOffendersMatchesFullSort(t *testing.T) {
	t.Parallel()
	parts := []string{"a", "b", "a|b", "b|a", "|", "ab"}
	limits := []string{"device", "login-ip", "login-account"}
	for trial := range 300 {
		rng := rand.New(rand.NewPCG(uint64(trial), 7))
		perMinute := 1 + rng.IntN(3)
		e := offenderEngine(perMinute)
		type id struct{ limit, p1, p2 string } // a (limit, key) as its parts
		slots := map[id]map[int64]int{}        // denials per second
		var seq uint64
		for range rng.IntN(400) {
			d := &streams.Decision{Class: "auth", Limit: limits[rng.IntN(len(limits))], Result: "limited",
				IP: "192.0.2." + itoa(int64(rng.IntN(3))), DeviceID: parts[rng.IntN(len(parts))],
				Account: parts[rng.IntN(len(parts))], Endpoint: parts[rng.IntN(len(parts))],
				TS: t0.Add(time.Duration(rng.Int64N(int64(60 * time.Second))))}
			seq++
			e.ApplyDecision(seq, 0, d, nil)
			k := id{limit: d.Limit, p1: d.DeviceID}
			switch d.Limit {
			case "login-ip":
				k = id{d.Limit, d.IP, d.Endpoint}
			case "login-account":
				k = id{d.Limit, d.Account, d.Endpoint}
			}
			if slots[k] == nil {
				slots[k] = map[int64]int{}
			}
			slots[k][d.TS.Unix()]++
		}
		now := sec(59 + 20*rng.Float64())
		var want []offTally
		for k, per := range slots {
			n := 0
			for s, c := range per {
				if s > now.Unix()-60 {
					n += c
				}
			}
			if n > perMinute {
				key := k.p1
				if k.p2 != "" {
					key += "|" + k.p2
				}
				want = append(want, offTally{k.limit, key, n})
			}
		}
		slices.SortFunc(want, compareTally)
		name := fmt.Sprintf("trial %d (per_minute %d, now %v)", trial, perMinute, now.Sub(t0))
		full := e.Offenders(now)
		got := make([]offTally, 0, len(full))
		perLimit := map[string]int{}
		for i, o := range full {
			got = append(got, offTally{o.Limit, o.Key, o.Count})
			perLimit[o.Limit]++
			if i > 0 && compareTally(got[i-1], got[i]) > 0 {
				t.Fatalf("%s: offender %d %+v listed after %+v", name, i, full[i], full[i-1])
			}
		}
		if len(want) > 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: offenders\n got %+v\nwant %+v", name, got, want)
		}
		if len(want) == 0 && full != nil {
			t.Fatalf("%s: offenders %+v, want nil", name, full)
		}
		for _, k := range []int{-1, 0, 1, 2, 3, rng.IntN(len(full) + 1), len(full) - 1, len(full), len(full) + 1} {
			top, per := e.TopOffenders(now, k)
			want := full
			if k >= 0 && k < len(full) {
				want = full[:k]
			}
			if len(want) == 0 {
				want = nil
			}
			if !reflect.DeepEqual(top, want) {
				t.Fatalf("%s: TopOffenders(k=%d):\n got %+v\nwant %+v", name, k, top, want)
			}
			if !reflect.DeepEqual(per, perLimit) {
				t.Fatalf("%s: TopOffenders(k=%d) counts %v, want %v", name, k, per, perLimit)
			}
		}
	}
}
