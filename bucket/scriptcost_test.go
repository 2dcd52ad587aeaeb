package bucket

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// RawBucketScript is the raw one-key token bucket the benchmarks compare
// decide.lua against: one HMGET, one HSET and a PEXPIRE, no multipliers,
// no locks (the ratio's denominator; also used by package bucket_test).
var RawBucketScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = tonumber(ARGV[1]) / 1000000
local burst = tonumber(ARGV[2])
local v = redis.call("HMGET", KEYS[1], "t", "l")
local tokens = burst
if v[1] then tokens = math.min(burst, tonumber(v[1]) + (now - tonumber(v[2])) * rate) end
local ok = 0
if tokens >= 1 then tokens = tokens - 1; ok = 1 end
redis.call("HSET", KEYS[1], "t", tostring(tokens), "l", tostring(now))
redis.call("PEXPIRE", KEYS[1], 60000)
return ok
`)

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

// BenchmarkRedisScriptCost measures what Redis itself spends per decision
// (its CPU, from INFO commandstats, not the round trip): decide.lua with
// 4 layers and 4 multiplier subjects over 1,000 keys, in batches of 1 and
// 8 decisions per EVALSHA, against the one-key raw token bucket script of
// BenchmarkRawEvalSha. Redis is single-threaded, so this bounds the
// decisions one Redis can serve whatever the number of limiter hosts.
// Run it alone: the counters are the server's.
func BenchmarkRedisScriptCost(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run("decide4-batch"+strconv.Itoa(n), func(b *testing.B) {
			c, p := testenv.Redis(b)
			ctx := context.Background()
			if err := decideScript.Load(ctx, c).Err(); err != nil {
				b.Fatal(err)
			}
			parts := []string{"ip", "user", "device", "account"}
			calls := make([]*call, 1000)
			for i := range calls {
				id := strconv.Itoa(i)
				req := Request{Cost: 1}
				for k, part := range parts {
					req.Subjects = append(req.Subjects, Subject{Key: MultiplierKey(p, part, id), Static: 1, Unverified: 1})
					req.Limits = append(req.Limits, Limit{Key: p + "{" + part + ":" + id + "}:b:" + part,
						Burst: 1e9, Rate: 1e9, Period: time.Second, Subjects: 1 << uint(k)})
				}
				calls[i] = &call{}
				calls[i].build(&req, "1000")
			}
			var buf batchBuf
			before := evalshaUsec(b, c)
			b.ResetTimer()
			done := 0
			for done < b.N {
				k := min(n, b.N-done)
				batch := make([]*call, k)
				for j := range batch {
					batch[j] = calls[(done+j)%len(calls)]
				}
				keys, args := buf.fill(batch)
				if err := c.EvalSha(ctx, decideScript.Hash(), keys, args...).Err(); err != nil {
					b.Fatal(err)
				}
				done += k
			}
			b.StopTimer()
			b.ReportMetric((evalshaUsec(b, c)-before)/float64(b.N), "redis-µs/decision")
		})
	}
	b.Run("raw1", func(b *testing.B) {
		c, p := testenv.Redis(b)
		ctx := context.Background()
		raw := RawBucketScript
		if err := raw.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		before := evalshaUsec(b, c)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := raw.EvalSha(ctx, c, []string{p + "raw:" + strconv.Itoa(i%1000)}, 1000000, 1000000).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric((evalshaUsec(b, c)-before)/float64(b.N), "redis-µs/decision")
	})
}
