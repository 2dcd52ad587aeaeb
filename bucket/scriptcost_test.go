package bucket

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// rawBucketSource is testdata/raw_bucket.lua, which scripts/bench runs too.
//
//go:embed testdata/raw_bucket.lua
var rawBucketSource string

// RawBucketScript is the raw one-key token bucket the benchmarks compare
// decide.lua against: one HMGET, one HSET and a PEXPIRE, no multipliers,
// no locks (the ratio's denominator; also used by package bucket_test).
var RawBucketScript = redis.NewScript(rawBucketSource)

// floorBatchSource is testdata/floor_batch.lua: decide.lua's commands and
// a token bucket's arithmetic alone, BenchmarkRedisScriptCost's floor.
//
//go:embed testdata/floor_batch.lua
var floorBatchSource string

var floorBatchScript = redis.NewScript(floorBatchSource)

// evalshaUsec reads the server's total microseconds spent in EVALSHA
// (INFO commandstats), the Redis CPU a script costs.
func evalshaUsec(tb testing.TB, c *redis.Client) float64 {
	tb.Helper()
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(l, "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					u, err := strconv.ParseFloat(v, 64)
					if err != nil {
						tb.Fatal(err)
					}
					return u
				}
			}
		}
	}
	return 0
}

// redisCPUUsec reads the server's own CPU so far (INFO cpu, user +
// system) in microseconds: unlike commandstats it includes reading and
// parsing the commands, writing the replies and the system calls.
func redisCPUUsec(tb testing.TB, c *redis.Client) float64 {
	tb.Helper()
	s, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	total := 0.0
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			total += f * 1e6
		}
	}
	return total
}

// costMeter reports Redis's cost per decision over a benchmark's loop:
// redis-µs/decision from commandstats (the scripts' own time) and
// redis-cpu-µs/decision from INFO cpu (everything the server spent).
type costMeter struct{ usec, cpu float64 }

func startCost(b *testing.B, c *redis.Client) costMeter {
	m := costMeter{usec: evalshaUsec(b, c), cpu: redisCPUUsec(b, c)}
	b.ResetTimer()
	return m
}

func (m costMeter) stop(b *testing.B, c *redis.Client) {
	b.StopTimer()
	b.ReportMetric((evalshaUsec(b, c)-m.usec)/float64(b.N), "redis-µs/decision")
	b.ReportMetric((redisCPUUsec(b, c)-m.cpu)/float64(b.N), "redis-cpu-µs/decision")
}

// BenchmarkRedisScriptCost measures what Redis itself spends per decision
// (its time in the script from INFO commandstats, and its whole CPU from
// INFO cpu; not the round trip): decide.lua with 4 layers and 4
// multiplier subjects over 1,000 keys, in batches of 1 and 8 decisions per
// EVALSHA, with no multiplier in force and with one on every subject,
// against the one-key raw token bucket script of BenchmarkRawEvalSha, one
// call at a time and pipelined 16 deep (the denominator of scripts/bench's
// ratio). floor-batch8 runs bench-policy-batch8's calls through
// testdata/floor_batch.lua, the same commands with a token bucket's
// arithmetic alone: what decide.lua costs beyond it is the price of
// multipliers, locks, shadow limits and the other kinds. Redis is
// single-threaded, so this bounds the decisions one Redis can serve
// whatever the number of limiter hosts. Run it alone, on a Redis of its
// own (TOLLGATE_TEST_REDIS): the counters are the server's.
func BenchmarkRedisScriptCost(b *testing.B) {
	for _, bc := range []struct {
		name  string
		n     int
		mult  bool
		route bool
	}{{"decide4-batch1", 1, false, false}, {"decide4-batch8", 8, false, false}, {"decide4-batch8-mult", 8, true, false},
		{"bench-policy-batch8", 8, false, true}, {"bench-policy-batch8-mult", 8, true, true},
		{"bench-policy-batch8-mult-nosummary", 8, true, true}, {"bench-policy-batch8-mult-sparse", 8, true, true},
		{"floor-batch8", 8, false, true}} {
		mode := multAll
		switch {
		case !bc.mult:
			mode = multNone
		case strings.HasSuffix(bc.name, "-nosummary"):
			mode = multLegacy
		case strings.HasSuffix(bc.name, "-sparse"):
			mode = multSparse
		}
		s := decideScript
		if strings.HasPrefix(bc.name, "floor") {
			s = floorBatchScript
		}
		b.Run(bc.name, func(b *testing.B) { benchScriptCost(b, s, bc.n, mode, bc.route) })
	}
	b.Run("raw1", func(b *testing.B) {
		c, p := testenv.Redis(b)
		ctx := context.Background()
		raw := RawBucketScript
		if err := raw.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		m := startCost(b, c)
		for i := 0; i < b.N; i++ {
			if err := raw.EvalSha(ctx, c, []string{p + "raw:" + strconv.Itoa(i%1000)}, 1000000, 1000000).Err(); err != nil {
				b.Fatal(err)
			}
		}
		m.stop(b, c)
	})
	b.Run("raw-pipe16", func(b *testing.B) {
		c, p := testenv.Redis(b)
		ctx := context.Background()
		raw := RawBucketScript
		if err := raw.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		m := startCost(b, c)
		for i := 0; i < b.N; i += 16 {
			pipe := c.Pipeline()
			for j := i; j < min(i+16, b.N); j++ {
				pipe.EvalSha(ctx, raw.Hash(), []string{p + "raw:" + strconv.Itoa(j%1000)}, 1000000, 1000000)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		m.stop(b, c)
	})
}

// multMode says which subjects of benchScriptCost have a multiplier in
// force (2x, never expiring).
type multMode int

const (
	multNone   multMode = iota
	multAll             // every subject, as the store writes it (with its summary)
	multLegacy          // every subject, as a hash alone (a build before summaries)
	multSparse          // the user of one decision in 10
)

// benchScriptCost runs s (decide.lua, its floor or a variant) in batches
// of n, with the multipliers mode says, after decide.lua has written every
// bucket once. Without route, 4 subjects each with a bucket of its own;
// with route, the layout of scripts/bench's policy: 3 subjects each with
// its bucket and a fourth bucket, the route's, shared by every decision.
func benchScriptCost(b *testing.B, s *redis.Script, n int, mode multMode, route bool) {
	c, p := testenv.Redis(b)
	ctx := context.Background()
	if err := s.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	parts := []string{"ip", "user", "device", "account"}
	if route {
		parts = parts[:3]
	}
	calls := make([]*call, 1000)
	for i := range calls {
		id := strconv.Itoa(i)
		req := Request{Cost: 1}
		if route {
			req.Limits = append(req.Limits, Limit{Key: p + "{route:POST /bench}:b:route", Burst: 1e9, Rate: 1e9, Period: time.Second})
		}
		for k, part := range parts {
			key := MultiplierKey(p, part, id)
			switch {
			case mode == multLegacy:
				if err := c.HSet(ctx, key, "admin", "2 0 bench").Err(); err != nil {
					b.Fatal(err)
				}
			case mode == multAll || mode == multSparse && part == "user" && i%10 == 0:
				if err := setMultiplierScript.Run(ctx, c, []string{key, key + summarySuffix}, "admin", "2 0 bench").Err(); err != nil {
					b.Fatal(err)
				}
			}
			req.Subjects = append(req.Subjects, RequestSubject{Key: key, Static: 1, Unverified: 1})
			req.Limits = append(req.Limits, Limit{Key: p + "{" + part + ":" + id + "}:b:" + part,
				Burst: 1e9, Rate: 1e9, Period: time.Second, Subjects: 1 << uint(k)})
		}
		calls[i] = &call{}
		calls[i].build(&req, 1000)
	}
	var buf batchBuf
	run := func(s *redis.Script, from, k int) {
		batch := make([]*call, k)
		for j := range batch {
			batch[j] = calls[(from+j)%len(calls)]
		}
		keys, args := buf.fill(batch)
		if err := s.Run(ctx, c, keys, args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < len(calls); i += n {
		// every bucket exists, as under load, whatever s writes
		run(decideScript, i, n)
	}
	m := startCost(b, c)
	for done := 0; done < b.N; done += n {
		run(s, done, min(n, b.N-done))
	}
	m.stop(b, c)
}

// BenchmarkRedisScriptVariant is bench-policy-batch8 through the script
// in the file TOLLGATE_SCRIPT_VARIANT names (decide.lua when unset): a
// changed decide.lua, or one cut short, measured on the calls the store
// sends. scripts/bench-script runs it for several files in turn, each on
// a Redis of its own, and compares them pair by pair.
func BenchmarkRedisScriptVariant(b *testing.B) {
	s := decideScript
	if f := os.Getenv("TOLLGATE_SCRIPT_VARIANT"); f != "" {
		src, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		s = redis.NewScript(string(src))
	}
	benchScriptCost(b, s, 8, multNone, true)
}

// BenchmarkRedisScriptKeyLiveness measures Redis CPU per decision of
// scripts/bench's policy (three 100000/s buckets, which expire 1 s after
// their last write, and the route's) in batches of 8, when every
// decision finds its buckets live (1,000 keys cycled) and when none does
// (every decision's keys are new, so Redis creates them and later
// expires them). The meter waits past the keys' expiry, so the expiry
// work counts (and ns/op means nothing: read the redis metrics, with
// -benchtime 40000x or more so the waits' idle CPU stays small).
func BenchmarkRedisScriptKeyLiveness(b *testing.B) {
	for _, mode := range []struct {
		name string
		pool int
	}{{"live", 1000}, {"fresh", 1 << 30}} {
		b.Run(mode.name, func(b *testing.B) { benchLiveness(b, mode.pool) })
	}
}

// benchLiveness runs BenchmarkRedisScriptKeyLiveness's decisions over pool ids (key i is
// id i % pool), eight per EVALSHA.
func benchLiveness(b *testing.B, pool int) {
	c, p := testenv.Redis(b)
	ctx := context.Background()
	if err := decideScript.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	mk := func(i int) *call {
		id := strconv.Itoa(i % pool)
		req := benchPolicyRequest(p, id, 1e7, 1e5)
		cl := &call{}
		cl.build(&req, 1000)
		return cl
	}
	var buf batchBuf
	run := func(from, k int) {
		batch := make([]*call, k)
		for j := range batch {
			batch[j] = mk(from + j)
		}
		keys, args := buf.fill(batch)
		if err := c.EvalSha(ctx, decideScript.Hash(), keys, args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 1000; i += 8 {
		run(i, 8)
	}
	time.Sleep(1500 * time.Millisecond) // the warm-up's keys of the fresh mode expire
	m := startCost(b, c)
	for done := 0; done < b.N; done += 8 {
		run(1000+done, min(8, b.N-done))
	}
	time.Sleep(1500 * time.Millisecond) // and this run's: their expiry counts
	m.stop(b, c)
}

// benchPolicyRequest is a decision of scripts/bench's policy for id under
// prefix p: the route's bucket (route per second) and one bucket per
// subject (ip, user, device; each rate per second) with its multiplier
// subject.
func benchPolicyRequest(p, id string, route, rate float64) Request {
	req := Request{Cost: 1}
	req.Limits = append(req.Limits, Limit{Key: p + "{route:POST /bench}:b:route", Burst: route, Rate: route, Period: time.Second})
	for k, part := range []string{"ip", "user", "device"} {
		key := MultiplierKey(p, part, id)
		req.Subjects = append(req.Subjects, RequestSubject{Key: key, Static: 1, Unverified: 1})
		req.Limits = append(req.Limits, Limit{Key: p + "{" + part + ":" + id + "}:b:" + part,
			Burst: rate, Rate: rate, Period: time.Second, Subjects: 1 << uint(k)})
	}
	return req
}

// BenchmarkRedisScriptKinds measures what Redis spends per decision
// (INFO commandstats and INFO cpu, as BenchmarkRedisScriptCost) when a
// calendar quota or a concurrency limit joins scripts/bench's three
// per-subject buckets and the route's, in batches of 8 over 1,000 users:
// "buckets" alone, "+quota" (a daily quota per user), "+concurrency" (2
// slots per user, each decision's lease released right after its batch:
// the release's own script is in the cpu metric, not in the
// commandstats one, which counts EVALSHA). Run it on a Redis of its own
// (TOLLGATE_TEST_REDIS).
func BenchmarkRedisScriptKinds(b *testing.B) {
	for _, k := range []string{"buckets", "+quota", "+concurrency"} {
		b.Run(k, func(b *testing.B) { benchKinds(b, k) })
	}
}

// benchKinds runs BenchmarkRedisScriptKinds's decisions with the extra
// limit kind names.
func benchKinds(b *testing.B, kind string) {
	c, p := testenv.Redis(b)
	ctx := context.Background()
	if err := decideScript.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	if err := releaseScript.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	seq := 0
	mk := func(i int) (*call, string) {
		id := strconv.Itoa(i % 1000)
		req := benchPolicyRequest(p, id, 1e9, 1e9)
		extra := ""
		switch kind {
		case "+quota":
			req.Limits = append(req.Limits, Limit{Key: p + "{user:" + id + "}:b:sms", Kind: KindQuota, Burst: 1e9, Calendar: Day, Subjects: 2})
		case "+concurrency":
			seq++
			extra = p + "{user:" + id + "}:b:exports"
			req.Lease = fmt.Sprintf("%024x", seq)
			req.Limits = append(req.Limits, Limit{Key: extra, Kind: KindConcurrency, Burst: 2, LeaseTTL: time.Minute, Subjects: 2})
		}
		cl := &call{}
		cl.build(&req, 1000)
		return cl, req.Lease
	}
	var buf batchBuf
	run := func(from, k int) {
		batch := make([]*call, k)
		leases := make([]string, k)
		for j := range batch {
			batch[j], leases[j] = mk(from + j)
		}
		keys, args := buf.fill(batch)
		if err := c.EvalSha(ctx, decideScript.Hash(), keys, args...).Err(); err != nil {
			b.Fatal(err)
		}
		for j, l := range leases {
			if l != "" {
				if err := releaseScript.Run(ctx, c, []string{batch[j].keys[len(batch[j].keys)-1]}, l).Err(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for i := 0; i < 1000; i += 8 {
		run(i, 8) // every bucket exists, as under load
	}
	m := startCost(b, c)
	for done := 0; done < b.N; done += 8 {
		run(1000+done, min(8, b.N-done))
	}
	m.stop(b, c)
}

// BenchmarkRedisEnvoyShape is envoyproxy/ratelimit's Redis work for one
// request of scripts/bench-peers' four descriptors (ip, user, device over
// 1,000 keys, and the route's one key): INCRBY and EXPIRE per descriptor,
// the eight pipelined in one round trip, as its fixed-window cache sends
// them; pipe16 sends 16 requests per round trip. It prices, on the Redis
// at hand, the denominator of issue 26's Redis ratio without the peer's
// load generator (compare BenchmarkRedisScriptCost/bench-policy-batch8).
func BenchmarkRedisEnvoyShape(b *testing.B) {
	for _, depth := range []int{1, 16} {
		b.Run("pipe"+strconv.Itoa(depth), func(b *testing.B) {
			c, p := testenv.Redis(b)
			ctx := context.Background()
			cpu0 := redisCPUUsec(b, c) // no script runs: INFO cpu alone
			b.ResetTimer()
			for i := 0; i < b.N; i += depth {
				pipe := c.Pipeline()
				for j := i; j < min(i+depth, b.N); j++ {
					id := strconv.Itoa(j % 1000)
					for _, k := range []string{"ip_" + id, "user_" + id, "device_" + id, "route"} {
						key := p + "bench_" + k + "_1764750000"
						pipe.IncrBy(ctx, key, 1)
						pipe.Expire(ctx, key, time.Second)
					}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((redisCPUUsec(b, c)-cpu0)/float64(b.N), "redis-cpu-µs/decision")
		})
	}
}

// TestFloorBatchAnswersAsDecide checks that floor_batch.lua is a faithful
// denominator: on token buckets without multipliers it answers every
// decision as decide.lua does (allowed, now, each bucket's tokens), over
// batches that allow, deny and refill, so the benchmark compares two
// scripts doing the same work.
func TestFloorBatchAnswersAsDecide(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	ctx := context.Background()
	start := time.Unix(1_800_000_000, 0)
	run := func(s *redis.Script, prefix string, now time.Time, users ...string) [][]float64 {
		t.Helper()
		calls := make([]*call, len(users))
		for i, u := range users {
			req := Request{Now: now, Cost: 1, Limits: []Limit{
				{Key: prefix + "{route:r}:b:route", Burst: 5, Rate: 1, Period: time.Second},
				{Key: prefix + "{user:" + u + "}:b:user", Burst: 2, Rate: 1, Period: time.Second, Subjects: 1},
			}, Subjects: []RequestSubject{{Key: MultiplierKey(prefix, "user", u), Static: 1, Unverified: 1}}}
			calls[i] = &call{}
			calls[i].build(&req, 1000)
		}
		var buf batchBuf
		keys, args := buf.fill(calls)
		out, err := s.Run(ctx, c, keys, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		got := make([][]float64, len(out))
		for i, o := range out {
			b := []byte(o.(string))
			for k := 0; k < 4; k++ { // allowed, now, the route's tokens, the user's
				got[i] = append(got[i], math.Float64frombits(binary.LittleEndian.Uint64(b[8*k:])))
			}
		}
		return got
	}
	for _, step := range []struct {
		after time.Duration
		users []string
	}{{0, []string{"a", "a", "a", "b"}}, {500 * time.Millisecond, []string{"a", "b", "b", "c"}}, {3 * time.Second, []string{"a", "a"}}} {
		now := start.Add(step.after)
		want := run(decideScript, p+"d:", now, step.users...)
		got := run(floorBatchScript, p+"f:", now, step.users...)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("at +%v: floor answered %v, decide.lua %v", step.after, got, want)
		}
	}
}

// BenchmarkRedisOptimisticShape prices the one design that would take the
// script out of a decision: optimistic transactions. Per batch of 8
// decisions of scripts/bench's policy as the limiter sends it (ip, user
// and device buckets, the route's served by its local share; the three
// subjects' multiplier hashes): WATCH of the buckets, one round trip of
// MGET (buckets) and EXISTS (hashes), then MULTI, a SET ... PX per bucket
// and EXEC, the arithmetic done in Go; an EXEC aborted because another
// batch wrote a watched bucket first is run again (aborts/batch).
//
// lanes1 sends one batch at a time (never aborted: the design's floor),
// lanes2 two at once as the limiter's two Redis lanes do, lanes8 eight
// (four limiter hosts), over 10,000 users and devices from 1,000 IPs at
// random; nat is lanes2 with the users behind 10 IPs (carrier NAT), and
// users1000 is lanes1 over bench-policy-batch8's 1,000 keys, the
// like-for-like comparison with BenchmarkRedisScriptCost
// (docs/benchmarks.md, session 17).
func BenchmarkRedisOptimisticShape(b *testing.B) {
	for _, bc := range []struct {
		name              string
		lanes, ips, users int
	}{{"lanes1-users1000", 1, 1000, 1000}, {"lanes1", 1, 1000, 10_000}, {"lanes2", 2, 1000, 10_000},
		{"lanes8", 8, 1000, 10_000}, {"lanes2-nat", 2, 10, 10_000}} {
		b.Run(bc.name, func(b *testing.B) {
			c, p := testenv.Redis(b)
			o := optimistic{c: c, p: p, ips: bc.ips, users: bc.users}
			o.fill(b) // every bucket exists, as under load
			o.aborts.Store(0)
			cpu0 := redisCPUUsec(b, c)
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + 8*bc.lanes - 1) / (8 * bc.lanes)
			for l := range bc.lanes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(l), 17))
					for range per {
						o.batch(b, r)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric((redisCPUUsec(b, c)-cpu0)/float64(per*bc.lanes*8), "redis-cpu-µs/decision")
			b.ReportMetric(float64(o.aborts.Load())/float64(per*bc.lanes), "aborts/batch")
		})
	}
}

// optimistic runs BenchmarkRedisOptimisticShape's batches.
type optimistic struct {
	c          *redis.Client
	p          string
	ips, users int
	aborts     atomic.Int64
}

// fill writes every bucket once, user u from IP u.
func (o *optimistic) fill(b *testing.B) {
	for u := 0; u < o.users; u += 8 {
		ids := make([]int, 8)
		for j := range ids {
			ids[j] = u + j
		}
		o.decide(b, ids, ids)
	}
}

// batch decides 8 users at random, each with its device, from an IP at
// random.
func (o *optimistic) batch(b *testing.B, r *rand.Rand) {
	users, ips := make([]int, 8), make([]int, 8)
	for j := range users {
		users[j], ips[j] = r.IntN(o.users), r.IntN(o.ips)
	}
	o.decide(b, users, ips)
}

// decide decides users[j] from ips[j] in one transaction, again until
// EXEC is not aborted.
func (o *optimistic) decide(b *testing.B, users, ips []int) {
	ctx := context.Background()
	var buckets, hashes []string
	for j, u := range users {
		for _, s := range [][2]string{{"ip", strconv.Itoa(ips[j] % o.ips)}, {"user", strconv.Itoa(u)}, {"device", strconv.Itoa(u)}} {
			buckets = append(buckets, o.p+"{"+s[0]+":"+s[1]+"}:b:"+s[0])
			hashes = append(hashes, MultiplierKey(o.p, s[0], s[1]))
		}
	}
	now := time.Now().UnixMicro()
	for {
		err := o.c.Watch(ctx, func(tx *redis.Tx) error {
			var mget *redis.SliceCmd
			if _, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				mget = pipe.MGet(ctx, buckets...)
				pipe.Exists(ctx, hashes...)
				return nil
			}); err != nil {
				return err
			}
			vals := mget.Val()
			_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				for i, k := range buckets {
					tokens := 1e9
					if s, ok := vals[i].(string); ok {
						if f, _, ok := strings.Cut(s, " "); ok {
							tokens, _ = strconv.ParseFloat(f, 64)
						}
					}
					pipe.Set(ctx, k, strconv.FormatFloat(tokens-1, 'f', -1, 64)+" "+strconv.FormatInt(now, 10), 2*time.Second)
				}
				return nil
			})
			return err
		}, buckets...)
		if err != redis.TxFailedErr {
			if err != nil {
				b.Error(err)
			}
			return
		}
		o.aborts.Add(1)
	}
}
