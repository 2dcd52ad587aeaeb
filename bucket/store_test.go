package bucket_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestMemoryBound: a key-rotation attack keeps the memory store at its bound.
func TestMemoryBound(t *testing.T) {
	t.Parallel()
	const maxKeys = 4096
	s := bucket.NewMemoryStore(bucket.MemoryOptions{MaxKeys: maxKeys})
	var res bucket.Result
	for i := 0; i < 100_000; i++ {
		req := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{{Key: fmt.Sprintf("{device:%d}:b:d", i), Burst: 10, Rate: 1, Period: time.Second}}}
		if err := s.Decide(context.Background(), &req, &res); err != nil || !res.Allowed {
			t.Fatalf("decision %d: %v %+v", i, err, res)
		}
	}
	if n := s.Len(); n > maxKeys {
		t.Fatalf("memory store holds %d buckets, bound %d", n, maxKeys)
	}
	// buckets that are full again are the first to go
	s.Sweep(t0.Add(time.Second))
	if n := s.Len(); n != 0 {
		t.Fatalf("after sweep: %d buckets, want 0", n)
	}
}

// TestMemoryEvictsFullFirst: under pressure a bucket that is full again
// is evicted before one that still remembers a debt.
func TestMemoryEvictsFullFirst(t *testing.T) {
	t.Parallel()
	s := bucket.NewMemoryStore(bucket.MemoryOptions{MaxKeys: 256}) // four buckets per shard
	var res bucket.Result
	hot := bucket.Limit{Key: "{ip:hot}:b:x", Burst: 2, Rate: 1, Period: time.Hour}
	for i := 0; i < 2; i++ {
		_ = s.Decide(context.Background(), &bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{hot}}, &res)
	}
	// many short buckets, full again a second later, rotate through every shard
	for i := 0; i < 10_000; i++ {
		req := bucket.Request{Now: t0.Add(2 * time.Second), Cost: 1, Limits: []bucket.Limit{{Key: fmt.Sprintf("{device:%d}:b:d", i), Burst: 1, Rate: 1, Period: time.Second}}}
		_ = s.Decide(context.Background(), &req, &res)
		req.Now = t0.Add(5 * time.Second)
		_ = s.Decide(context.Background(), &req, &res)
	}
	_ = s.Decide(context.Background(), &bucket.Request{Now: t0.Add(5 * time.Second), Cost: 1, Limits: []bucket.Limit{hot}}, &res)
	if res.Allowed {
		t.Fatalf("hot bucket was evicted and forgot its debt: %+v", res)
	}
}

func TestRedisUsesServerClockAndExpires(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := bucket.NewRedisStore(c, bucket.RedisOptions{})
	defer s.Close()
	ctx := context.Background()
	key := p + "{ip:1}:b:x"
	req := bucket.Request{Cost: 1, Limits: []bucket.Limit{{Key: key, Burst: 10, Rate: 10, Period: time.Minute}}}
	var res bucket.Result
	before := time.Now()
	if err := s.Decide(ctx, &req, &res); err != nil || !res.Allowed {
		t.Fatalf("%v %+v", err, res)
	}
	if d := res.Now.Sub(before); d < -time.Second || d > time.Second {
		t.Fatalf("decision time %v is not Redis TIME (wall %v)", res.Now, before)
	}
	// one token spent at 1 token per 6 s: full in 6 s, plus the 1 s slack
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil || ttl <= 6*time.Second || ttl > 7*time.Second {
		t.Fatalf("PTTL = %v, %v; want (6s, 7s]", ttl, err)
	}
	v, _ := c.Get(ctx, key).Result()
	if len(v) != 16 || math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[:8]))) != 9000000 {
		t.Fatalf("stored state %q, want 9 tokens in micro-tokens (two little-endian float64s)", v)
	}
}

func TestRedisReloadsScriptOnNoScript(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	c := newClient(srv.Addr)
	defer c.Close()
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 2 * time.Second})
	defer s.Close()
	req := bucket.Request{Now: t0, Cost: 1, Limits: []bucket.Limit{{Key: "{ip:1}:b:x", Burst: 10, Rate: 10, Period: time.Minute}}}
	var res bucket.Result
	for i := 0; i < 3; i++ {
		if err := c.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Decide(context.Background(), &req, &res); err != nil || !res.Allowed || res.Limits[0].Remaining != float64(9-i) {
			t.Fatalf("decision %d after SCRIPT FLUSH: %v %+v", i, err, res)
		}
	}
}

func TestRedisDownIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	c := newClient(srv.Addr)
	defer c.Close()
	s := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: 200 * time.Millisecond})
	defer s.Close()
	srv.Stop()
	req := bucket.Request{Cost: 1, Limits: []bucket.Limit{{Key: "{ip:1}:b:x", Burst: 10, Rate: 10, Period: time.Minute}}}
	var res bucket.Result
	err := s.Decide(context.Background(), &req, &res)
	if err == nil || !errorsIs(err, bucket.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := bucket.NewMemoryStore(bucket.MemoryOptions{})
	ok := bucket.Limit{Key: "k", Burst: 1, Rate: 1, Period: time.Second}
	tests := []struct {
		name string
		req  bucket.Request
	}{
		{"negative cost", bucket.Request{Cost: -1, Limits: []bucket.Limit{ok}}},
		{"zero burst", bucket.Request{Cost: 1, Limits: []bucket.Limit{{Key: "k", Rate: 1, Period: time.Second}}}},
		{"zero period", bucket.Request{Cost: 1, Limits: []bucket.Limit{{Key: "k", Burst: 1, Rate: 1}}}},
		{"subject out of range", bucket.Request{Cost: 1, Limits: []bucket.Limit{{Key: "k", Burst: 1, Rate: 1, Period: time.Second, Subjects: 2}}, Subjects: []bucket.RequestSubject{{Key: "s", Static: 1, Unverified: 1}}}},
		{"too many limits", bucket.Request{Cost: 1, Limits: make([]bucket.Limit, 33)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res bucket.Result
			if err := s.Decide(context.Background(), &tt.req, &res); !errorsIs(err, bucket.ErrBadRequest) {
				t.Fatalf("err = %v, want ErrBadRequest", err)
			}
		})
	}
}

func TestEscapeID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"d_1":        "d_1",
		"a}b{c":      "a%7Db%7Bc",
		"x:y|z%":     "x%3Ay%7Cz%25",
		"sp ace\n":   "sp%20ace%0A",
		"198.51.0.7": "198.51.0.7",
	} {
		if got := bucket.EscapeID(in); got != want {
			t.Errorf("EscapeID(%q) = %q, want %q", in, got, want)
		}
		if got := string(bucket.AppendEscapedID([]byte("k|"), in)); got != "k|"+want {
			t.Errorf("AppendEscapedID(%q) = %q, want %q", in, got, "k|"+want)
		}
	}
	if got := bucket.MultiplierKey("tg:", "device", "d}1"); got != "tg:{device:d%7D1}:m" {
		t.Errorf("MultiplierKey = %q", got)
	}
	if got := bucket.LockKey("tg:", "account", "alice"); got != "tg:{account:alice}:l" {
		t.Errorf("LockKey = %q", got)
	}
}

// TestKeyTemplate checks that the templates append the bytes of the
// builders they stand for, for every kind of id.
func TestKeyTemplate(t *testing.T) {
	t.Parallel()
	ids := []string{"", "d_1", "a}b{c", "x:y|z%", "sp ace\n", "198.51.0.7"}
	for _, subject := range []string{"global", "ip", "user", "device", "route"} {
		for _, id := range ids {
			bt := bucket.NewBucketKeyTemplate("tg:", subject, "login-ip")
			want := bucket.AppendBucketName(bucket.AppendSubjectTag([]byte("k|"), "tg:", subject, id), "login-ip")
			if got := bt.Append([]byte("k|"), id); string(got) != string(want) {
				t.Errorf("bucket template %s %q = %q, want %q", subject, id, got, want)
			}
			mt := bucket.NewMultiplierKeyTemplate("tg:", subject)
			want = bucket.AppendMultiplierKey([]byte("k|"), "tg:", subject, id)
			if got := mt.Append([]byte("k|"), id); string(got) != string(want) {
				t.Errorf("multiplier template %s %q = %q, want %q", subject, id, got, want)
			}
		}
	}
}
