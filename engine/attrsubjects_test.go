package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
)

// attrSubjectPolicy has limits keyed by the phone_prefix attribute (alone
// and with the ip), one by another attribute and one by the device.
const attrSubjectPolicy = `version: 1
limits:
  - {name: prefix,    by: [attr:phone_prefix],     rate: 100/h}
  - {name: prefix-ip, by: [ip, attr:phone_prefix], rate: 50/h}
  - {name: tenant,    by: [attr:tenant],           rate: 200/h}
  - {name: device,    by: [device],                rate: 10/h}
`

// attrStores are the memory store and a real Redis.
func attrStores(t *testing.T) map[string]bucket.Store {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	rs := bucket.NewRedisStore(rdb, bucket.RedisOptions{Prefix: prefix, Timeout: 5 * time.Second})
	t.Cleanup(func() { rs.Close() })
	return map[string]bucket.Store{"memory": bucket.NewMemoryStore(bucket.MemoryOptions{}), "redis": rs}
}

// bursts decides in and returns its outcome and the effective
// burst of each applied limit by name.
func bursts(t *testing.T, e *Engine, in Input) (Outcome, map[string]float64) {
	t.Helper()
	var d Decision
	if err := e.Decide(context.Background(), &in, &d); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for i, l := range d.Applied() {
		got[l.Name] = d.LimitResult(i).Burst
	}
	return d.Outcome, got
}

// TestAttrSubjectMultiplier (7.4): a multiplier on attr:phone_prefix 4479
// (a tighten, then a block) scales exactly the limits whose `by` names
// attr:phone_prefix, for requests carrying 4479: not the limits keyed by
// another attribute or by the device, and not requests of another prefix.
func TestAttrSubjectMultiplier(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("p.yaml", []byte(attrSubjectPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range attrStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }})
			if err != nil {
				t.Fatal(err)
			}
			in := func(prefix string) Input {
				return Input{IP: "198.51.100.7", DeviceID: "d1", Attributes: map[string]string{"phone_prefix": prefix, "tenant": "acme"}}
			}
			nominal := map[string]float64{"prefix": 100, "prefix-ip": 50, "tenant": 200, "device": 10}
			sub := bucket.Subject{Kind: "attr:phone_prefix", ID: "4479"}
			set := func(v float64) {
				t.Helper()
				if err := store.SetMultiplier(context.Background(), sub, bucket.Multiplier{Source: "velocity", Value: v, ExpiresAt: time.Now().Add(30 * time.Minute)}); err != nil {
					t.Fatal(err)
				}
			}
			set(0.05)
			if o, b := bursts(t, e, in("4479")); o != Allowed || fmt.Sprint(b) != fmt.Sprint(map[string]float64{"prefix": 5, "prefix-ip": 2.5, "tenant": 200, "device": 10}) {
				t.Errorf("tightened prefix: %v %v", o, b)
			}
			if o, b := bursts(t, e, in("4420")); o != Allowed || fmt.Sprint(b) != fmt.Sprint(nominal) {
				t.Errorf("other prefix: %v %v, want %v", o, b, nominal)
			}
			set(0)
			blocked := in("4479")
			blocked.Cost = 1
			var d Decision
			if err := e.Decide(context.Background(), &blocked, &d); err != nil {
				t.Fatal(err)
			}
			// the wait is the block's end (30 minutes), not the hour of "never"
			if d.Outcome != Limited || !strings.HasPrefix(d.Binding.Name, "prefix") || d.RetryAfter <= 29*time.Minute || d.RetryAfter > 30*time.Minute {
				t.Errorf("blocked prefix: %v by %v, retry %v; want limited by prefix until the block ends", d.Outcome, d.Binding, d.RetryAfter)
			}
			noPrefix := Input{IP: "198.51.100.7", DeviceID: "d1", Cost: 1, Attributes: map[string]string{"tenant": "acme"}}
			if o, b := bursts(t, e, noPrefix); o != Allowed || b["device"] != 10 || b["tenant"] != 200 {
				t.Errorf("the same device without the prefix: %v %v", o, b)
			}
		})
	}
}

// TestAttrSubjectsOfEveryAttribute: a request may carry 16 attributes and
// a policy key limits by each; a block on the last of them still applies
// (no attribute subject is dropped for want of room).
func TestAttrSubjectsOfEveryAttribute(t *testing.T) {
	t.Parallel()
	var text strings.Builder
	text.WriteString("version: 1\nlimits:\n")
	attrs := map[string]string{}
	for i := range 16 {
		fmt.Fprintf(&text, "  - {name: a%d, by: [attr:a%d], rate: 100/h}\n", i, i)
		attrs[fmt.Sprintf("a%d", i)] = "v"
	}
	p, err := policy.Parse("p.yaml", []byte(text.String()))
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range attrStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.SetMultiplier(context.Background(), bucket.Subject{Kind: "attr:a15", ID: "v"},
				bucket.Multiplier{Source: "admin", Value: 0.5, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			o, b := bursts(t, e, Input{IP: "198.51.100.7", Attributes: attrs})
			if o != Allowed || len(b) != 16 || b["a15"] != 50 || b["a0"] != 100 {
				t.Fatalf("%v %v, want a15 at 50 and the others at 100", o, b)
			}
		})
	}
}
