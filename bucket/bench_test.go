package bucket_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

func layered(prefix string, n int, id string) bucket.Request {
	parts := []string{"ip", "user", "device", "account"}
	req := bucket.Request{Cost: 1}
	for i := 0; i < n; i++ {
		req.Subjects = append(req.Subjects, bucket.RequestSubject{Key: bucket.MultiplierKey(prefix, parts[i], id), Static: 1, Unverified: 1})
		req.Limits = append(req.Limits, bucket.Limit{
			Key: prefix + "{" + parts[i] + ":" + id + "}:b:" + parts[i], Burst: 1e9, Rate: 1e9, Period: time.Second, Subjects: 1 << uint(i),
		})
	}
	return req
}

// benchMemory passes the decision time in, as the engine does for the
// memory store (it has read the clock already).
func benchMemory(b *testing.B, n int) {
	s := bucket.NewMemoryStore(bucket.MemoryOptions{})
	req := layered("tg:", n, "k")
	req.Now = time.Now()
	res := bucket.Result{Limits: make([]bucket.LimitResult, 0, n)}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Decide(ctx, &req, &res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemoryDecide1 is one decision over one limit in the memory store.
func BenchmarkMemoryDecide1(b *testing.B) { benchMemory(b, 1) }

// BenchmarkMemoryDecide4 is one decision over 4 layered limits (ip, user,
// device, account, each with its multiplier subject).
func BenchmarkMemoryDecide4(b *testing.B) { benchMemory(b, 4) }

// BenchmarkMemoryDecide4ManyKeys is one decision at a time over 4 layered
// limits of 200,000 identities (800,000 buckets), taken in turn (so the
// requests themselves are read in order): the buckets are scattered over
// the tables, so the look-ups miss the CPU caches, as in a replay or a
// limiter with many users.
func BenchmarkMemoryDecide4ManyKeys(b *testing.B) {
	s := bucket.NewMemoryStore(bucket.MemoryOptions{})
	const ids = 200_000
	reqs := make([]bucket.Request, ids)
	for i := range reqs {
		reqs[i] = layered("tg:", 4, "u_"+strconv.Itoa(i))
		reqs[i].Now = time.Unix(1_800_000_000, 0)
	}
	res := bucket.Result{Limits: make([]bucket.LimitResult, 0, 4)}
	ctx := context.Background()
	for i := range reqs {
		_ = s.Decide(ctx, &reqs[i], &res)
	}
	b.ReportAllocs()
	cpu0 := testenv.CPUTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Decide(ctx, &reqs[i%ids], &res); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((testenv.CPUTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkMemoryDecide4Parallel spreads 4-limit decisions over 1000 keys.
func BenchmarkMemoryDecide4Parallel(b *testing.B) {
	s := bucket.NewMemoryStore(bucket.MemoryOptions{})
	reqs := make([]bucket.Request, 1000)
	for i := range reqs {
		reqs[i] = layered("tg:", 4, strconv.Itoa(i))
	}
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		res := bucket.Result{Limits: make([]bucket.LimitResult, 0, 4)}
		for pb.Next() {
			req := &reqs[seq.Add(1)%int64(len(reqs))]
			if err := s.Decide(context.Background(), req, &res); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRedisDecide4 runs 4-limit decisions in parallel over 1000 keys
// through the pipelining RedisStore; BenchmarkRawEvalSha, in the same run,
// is the denominator: a one-key token bucket script, one EVALSHA per call.
func BenchmarkRedisDecide4(b *testing.B) {
	c, p := testenv.Redis(b)
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: time.Second})
	defer s.Close()
	reqs := make([]bucket.Request, 1000)
	for i := range reqs {
		reqs[i] = layered(p, 4, strconv.Itoa(i))
	}
	var seq atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var res bucket.Result
		for pb.Next() {
			req := &reqs[seq.Add(1)%int64(len(reqs))]
			if err := s.Decide(context.Background(), req, &res); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRedisDecide4Serial is one decision at a time: the round trip.
func BenchmarkRedisDecide4Serial(b *testing.B) {
	c, p := testenv.Redis(b)
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: time.Second})
	defer s.Close()
	req := layered(p, 4, "serial")
	var res bucket.Result
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Decide(context.Background(), &req, &res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawEvalSha is the raw cost of one unpipelined EVALSHA of a
// one-key token bucket from 32 goroutines: the ratio's denominator.
func BenchmarkRawEvalSha(b *testing.B) {
	c, p := testenv.Redis(b)
	ctx := context.Background()
	if err := bucket.RawBucketScript.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = p + "raw:" + strconv.Itoa(i)
	}
	var seq atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := keys[seq.Add(1)%int64(len(keys))]
			if err := bucket.RawBucketScript.EvalSha(ctx, c, []string{k}, 1000000, 1000000).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMemoryUntrustDevice frees a device id trusted by one account
// of a store whose 100,000 accounts each trust a device: what the admin
// API's attestation_forget, and a replay of one, cost the memory store.
func BenchmarkMemoryUntrustDevice(b *testing.B) {
	ctx := context.Background()
	s := bucket.NewMemoryStore(bucket.MemoryOptions{MaxSubjects: 200_000})
	until := time.Now().Add(time.Hour)
	for i := range 100_000 {
		if err := s.Trust(ctx, bucket.Subject{Kind: "account", ID: "a" + strconv.Itoa(i)}, "d"+strconv.Itoa(i), until); err != nil {
			b.Fatal(err)
		}
	}
	acct := bucket.Subject{Kind: "account", ID: "a0"}
	b.ResetTimer()
	for b.Loop() {
		if err := s.Trust(ctx, acct, "freed", until); err != nil {
			b.Fatal(err)
		}
		if n, err := s.UntrustDevice(ctx, "freed"); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}
