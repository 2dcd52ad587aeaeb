package bucket

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// runBatch evaluates reqs as ONE batch (one EVALSHA) and returns each
// decision's result or error, in order.
func runBatch(t *testing.T, s *RedisStore, reqs []Request) ([]Result, []error) {
	t.Helper()
	calls := make([]*call, len(reqs))
	for i := range reqs {
		calls[i] = &call{done: make(chan struct{}, 1), deadline: time.Now().Add(s.timeout)}
		calls[i].build(&reqs[i], s.slack)
	}
	var buf batchBuf
	s.run(calls, &buf)
	res := make([]Result, len(reqs))
	errs := make([]error, len(reqs))
	for i, c := range calls {
		<-c.done
		errs[i] = c.err
		if c.err == nil {
			errs[i] = parseDecision(c.reply, &reqs[i], &res[i])
		}
	}
	return res, errs
}

func TestBatchRunsDecisionsInOrder(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := NewRedisStore(c, RedisOptions{Timeout: 2 * time.Second, ExpirySlack: time.Hour})
	defer s.Close()
	now := time.Unix(1_800_000_000, 0)
	reqs := make([]Request, 20)
	for i := range reqs {
		reqs[i] = Request{Now: now, Cost: 1, Limits: []Limit{
			{Key: p + "{ip:1}:b:a", Burst: 7, Rate: 1, Period: time.Hour, Subjects: 1},
			{Key: p + "{ip:1}:b:b", Burst: 100, Rate: 1, Period: time.Hour, Subjects: 1},
		}, Subjects: []RequestSubject{{Key: p + "{ip:1}:m", Static: 1, Unverified: 1}}}
	}
	res, errs := runBatch(t, s, reqs)
	for i := range reqs {
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		want := i < 7
		if res[i].Allowed != want {
			t.Fatalf("decision %d allowed=%v, want %v", i, res[i].Allowed, want)
		}
		wantA, wantB := float64(6-i), float64(99-i)
		if !want {
			// denied decisions take nothing anywhere (all-or-nothing)
			wantA, wantB = 0, 93
		}
		if got := res[i].Limits[0].Remaining; got != wantA {
			t.Fatalf("decision %d: bucket a has %v, want %v", i, got, wantA)
		}
		if got := res[i].Limits[1].Remaining; got != wantB {
			t.Fatalf("decision %d: bucket b has %v, want %v", i, got, wantB)
		}
	}
}

func TestBatchIsolatesAFailedDecision(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := NewRedisStore(c, RedisOptions{Timeout: 2 * time.Second})
	defer s.Close()
	ctx := context.Background()
	// An exempting lockout on account "bad" whose trust set key holds a
	// string (something else wrote it): SISMEMBER fails with WRONGTYPE for
	// the decision that must check it.
	lock := p + "{account:bad}:l"
	if err := s.setLockAt(ctx, lock, "", Lock{Kind: "lockout", Until: time.Now().Add(time.Hour), Exempt: true, Rule: "r"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, p+"{account:bad}:t", "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	mk := func(id string) Request {
		return Request{Cost: 1, Device: "d1",
			Limits:    []Limit{{Key: p + "{account:" + id + "}:b:x", Burst: 5, Rate: 1, Period: time.Second}},
			Locks:     []string{p + "{account:" + id + "}:l"},
			TrustKeys: []string{p + "{account:" + id + "}:t"}}
	}
	res, errs := runBatch(t, s, []Request{mk("a"), mk("bad"), mk("b")})
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "WRONGTYPE") {
		t.Fatalf("the bad decision's error = %v, want WRONGTYPE", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil || !res[i].Allowed || res[i].Limits[0].Remaining != 4 {
			t.Fatalf("decision %d beside the bad one: %v %+v", i, errs[i], res[i])
		}
	}
	// and through Decide the failure is the store's: ErrUnavailable
	req := mk("bad")
	var r Result
	if err := s.Decide(ctx, &req, &r); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Decide on the bad key: %v", err)
	}
}

func TestBatchMixesInjectedAndRedisTime(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := NewRedisStore(c, RedisOptions{Timeout: 2 * time.Second, ExpirySlack: time.Hour})
	defer s.Close()
	past := time.Unix(1_000_000_000, 0)
	lim := func(k string) []Limit {
		return []Limit{{Key: p + "{ip:2}:b:" + k, Burst: 3, Rate: 1, Period: time.Hour}}
	}
	res, errs := runBatch(t, s, []Request{
		{Now: past, Cost: 1, Limits: lim("x")},
		{Cost: 1, Limits: lim("y")},
		{Now: past.Add(time.Second), Cost: 1, Limits: lim("x")}, // 1 s refills 1e6/3600 micro-tokens
		{Cost: 1, Limits: lim("y")},
	})
	for i, e := range errs {
		if e != nil {
			t.Fatalf("decision %d: %v", i, e)
		}
	}
	if !res[0].Now.Equal(past) || !res[2].Now.Equal(past.Add(time.Second)) {
		t.Fatalf("injected times came back as %v and %v", res[0].Now, res[2].Now)
	}
	if !res[1].Now.Equal(res[3].Now) || time.Since(res[1].Now).Abs() > time.Minute {
		t.Fatalf("Redis TIME decisions at %v and %v: one clock read per batch, near now", res[1].Now, res[3].Now)
	}
	if res[2].Limits[0].Remaining != 1.000277 || res[3].Limits[0].Remaining != 1 {
		t.Fatalf("remaining %v and %v, want 1.000277 and 1", res[2].Limits[0].Remaining, res[3].Limits[0].Remaining)
	}
}

// TestLongBatchIsSplitIntoScripts: a batch longer than maxPerScript runs
// as several scripts in one pipeline, in order, each decision answered.
func TestLongBatchIsSplitIntoScripts(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := NewRedisStore(c, RedisOptions{Timeout: 2 * time.Second, ExpirySlack: time.Hour})
	defer s.Close()
	ctx := context.Background()
	// one exempting lockout whose trust set is a string: decision 50 fails
	if err := s.setLockAt(ctx, p+"{account:bad}:l", "", Lock{Kind: "lockout", Until: time.Now().Add(time.Hour), Exempt: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, p+"{account:bad}:t", "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now() // the lock is in force
	n := 2*maxPerScript + 11
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Now: now, Cost: 1, Limits: []Limit{{Key: p + "{ip:9}:b:x", Burst: 40, Rate: 1, Period: time.Hour}}}
	}
	reqs[50] = Request{Now: now, Cost: 1, Device: "d", Limits: []Limit{{Key: p + "{account:bad}:b:x", Burst: 1, Rate: 1, Period: time.Hour}},
		Locks: []string{p + "{account:bad}:l"}, TrustKeys: []string{p + "{account:bad}:t"}}
	res, errs := runBatch(t, s, reqs)
	taken := 0
	for i := range reqs {
		if i == 50 {
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "WRONGTYPE") {
				t.Fatalf("decision 50: %v, want WRONGTYPE", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		want := taken < 40
		if res[i].Allowed != want || (want && res[i].Limits[0].Remaining != float64(39-taken)) {
			t.Fatalf("decision %d: allowed=%v remaining=%v, want allowed=%v after %d taken", i, res[i].Allowed, res[i].Limits[0].Remaining, want, taken)
		}
		if want {
			taken++
		}
	}
}

// TestBatchWritesEachBucketOnce: decisions of one batch that share a
// bucket see each other's takes in order, and the bucket is left with the
// last one's state and expiry (the script writes it once, after the batch).
func TestBatchWritesEachBucketOnce(t *testing.T) {
	t.Parallel()
	c, p := testenv.Redis(t)
	s := NewRedisStore(c, RedisOptions{Timeout: 2 * time.Second, ExpirySlack: time.Hour})
	defer s.Close()
	now := time.Unix(1_800_000_000, 0)
	shared := p + "{route:r}:b:route"
	reqs := make([]Request, 6)
	for i := range reqs {
		own := p + "{ip:" + string(rune('a'+i)) + "}:b:ip"
		reqs[i] = Request{Now: now.Add(time.Duration(i) * time.Second), Cost: 1, Limits: []Limit{
			{Key: shared, Burst: 4, Rate: 1, Period: time.Hour},
			{Key: own, Burst: 10, Rate: 1, Period: time.Hour},
		}}
	}
	res, errs := runBatch(t, s, reqs)
	for i := range reqs {
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		// 1 s refills 1e6/3600 micro-tokens (277 once rounded down, 555 for 2 s)
		want := []float64{3, 2.000277, 1.000554, 0.000831, 0.001108, 0.001386}[i]
		if got := res[i].Limits[0].Remaining; got != want || res[i].Allowed != (i < 4) {
			t.Fatalf("decision %d: allowed=%v shared remaining %v, want allowed=%v remaining %v", i, res[i].Allowed, got, i < 4, want)
		}
	}
	// the stored state is the last take's (decision 3 at now+3s)
	var r Result
	if err := s.Decide(context.Background(), &Request{Now: now.Add(3 * time.Second), Cost: 0, Limits: []Limit{{Key: shared, Burst: 4, Rate: 1, Period: time.Hour}}}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Limits[0].Remaining != 0.000831 {
		t.Fatalf("stored shared bucket has %v, want 0.000831", r.Limits[0].Remaining)
	}
	ttl, err := c.PTTL(context.Background(), shared).Result()
	if err != nil || ttl <= time.Hour || ttl > 5*time.Hour {
		t.Fatalf("PTTL = %v, %v; want the last take's (about 4 h to refill plus an hour of slack)", ttl, err)
	}
}

// commandCalls returns how many times Redis ran each of cmds (INFO
// commandstats; script-internal calls included), from a private server.
func commandCalls(t *testing.T, c *redis.Client, cmds ...string) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int, len(cmds))
	for _, l := range strings.Split(info, "\n") {
		for _, cmd := range cmds {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_"+cmd+":calls="); ok {
				n, _, _ := strings.Cut(rest, ",")
				out[cmd], _ = strconv.Atoi(n)
			}
		}
	}
	return out
}

// privateStore returns a store over a Redis of the test's own, whose
// command counters only the test moves, and a client of that Redis.
func privateStore(t *testing.T) (*RedisStore, *redis.Client) {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s := NewRedisStore(c, RedisOptions{Timeout: 2 * time.Second})
	t.Cleanup(func() { s.Close() })
	return s, c
}

// TestBatchSkipsAbsentMultipliers: a batch whose subjects have no
// multiplier hash reads none (one EXISTS for the batch), and one hash in
// force makes the batch read them all, with the same answers as ever.
func TestBatchSkipsAbsentMultipliers(t *testing.T) {
	t.Parallel()
	s, c := privateStore(t)
	now := time.Unix(1_800_000_000, 0)
	batch := func() []Request {
		reqs := make([]Request, 4)
		for i := range reqs {
			ip, user := "{ip:"+strconv.Itoa(i)+"}", "{user:"+strconv.Itoa(i)+"}"
			reqs[i] = Request{Now: now, Cost: 1, Limits: []Limit{
				{Key: ip + ":b:ip", Burst: 10, Rate: 1, Period: time.Hour, Subjects: 1},
				{Key: user + ":b:user", Burst: 10, Rate: 1, Period: time.Hour, Subjects: 2},
			}, Subjects: []RequestSubject{{Key: ip + ":m", Static: 1, Unverified: 1}, {Key: user + ":m", Static: 1, Unverified: 1}}}
		}
		return reqs
	}
	check := func(round string, want func(i int) float64) {
		t.Helper()
		res, errs := runBatch(t, s, batch())
		for i := range res {
			if errs[i] != nil || !res[i].Allowed {
				t.Fatalf("%s: decision %d: allowed=%v err=%v", round, i, res[i].Allowed, errs[i])
			}
			if got := res[i].Limits[1].Burst; got != want(i) {
				t.Fatalf("%s: decision %d: user burst %v, want %v", round, i, got, want(i))
			}
		}
	}
	check("no multipliers", func(int) float64 { return 10 })
	if got := commandCalls(t, c, "exists", "hgetall"); got["exists"] != 1 || got["hgetall"] != 0 {
		t.Fatalf("no multipliers in force: %v calls; want exists=1 hgetall=0", got)
	}
	if err := c.HSet(context.Background(), "{user:2}:m", "admin", "0.5 0").Err(); err != nil {
		t.Fatal(err)
	}
	check("one multiplier", func(i int) float64 { return map[bool]float64{true: 5, false: 10}[i == 2] })
	if got := commandCalls(t, c, "exists", "hgetall"); got["exists"] != 2 || got["hgetall"] != 8 {
		t.Fatalf("one multiplier in force: %v calls; want exists=2 hgetall=8", got)
	}
}

// TestBatchReadsOnce: a batch reads its locks and buckets with one MGET
// however many decisions it holds, and each decision still sees the state
// the ones before it left (a shared bucket drains across the batch) and
// the locks of its own subjects.
func TestBatchReadsOnce(t *testing.T) {
	t.Parallel()
	s, c := privateStore(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	if err := s.SetLock(ctx, Subject{Kind: "account", ID: "2"}, Lock{Kind: "lockout", Rule: "r", Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, c, "mget")["mget"]
	reqs := make([]Request, 5)
	for i := range reqs {
		id := strconv.Itoa(i)
		reqs[i] = Request{Now: now, Cost: 1, Limits: []Limit{
			{Key: "{route:r}:b:route", Burst: 3, Rate: 1, Period: time.Hour},
			{Key: "{ip:" + id + "}:b:ip", Burst: 10, Rate: 1, Period: time.Hour},
		}, Locks: []string{LockKey(DefaultPrefix, "account", id)}}
	}
	res, errs := runBatch(t, s, reqs)
	if got := commandCalls(t, c, "mget")["mget"] - before; got != 1 {
		t.Fatalf("a batch of %d decisions ran %d MGETs, want 1", len(reqs), got)
	}
	// 0, 1, 3 take the route's 3 tokens; 2 is locked; 4 finds none left
	want := []string{"allowed", "allowed", "locked", "allowed", "denied"}
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		got := map[bool]string{true: "allowed", false: "denied"}[res[i].Allowed]
		if res[i].Locked {
			got = "locked"
		}
		if got != want[i] {
			t.Errorf("decision %d: %s, want %s", i, got, want[i])
		}
	}
	if got := res[4].Limits[0].Remaining; got != 0 {
		t.Errorf("the route bucket after the batch holds %v, want 0", got)
	}
}

// summaryBatch is 4 decisions, each with an ip and a user subject under
// the store's prefix, whose user limits have a burst of 10.
func summaryBatch(s *RedisStore, now time.Time) []Request {
	reqs := make([]Request, 4)
	for i := range reqs {
		id := strconv.Itoa(i)
		ip, user := MultiplierKey(s.Prefix(), "ip", id), MultiplierKey(s.Prefix(), "user", id)
		reqs[i] = Request{Now: now, Cost: 1, Limits: []Limit{
			{Key: s.Prefix() + "{ip:" + id + "}:b:ip", Burst: 10, Rate: 1, Period: time.Hour, Subjects: 1},
			{Key: s.Prefix() + "{user:" + id + "}:b:user", Burst: 10, Rate: 1, Period: time.Hour, Subjects: 2},
		}, Subjects: []RequestSubject{{Key: ip, Static: 1, Unverified: 1}, {Key: user, Static: 1, Unverified: 1}}}
	}
	return reqs
}

// TestBatchReadsSummaries: multipliers set through the store are read from
// their summaries with the batch's one MGET, no HGETALL; a hash written
// without a summary (by a build before summaries) is still read, and then
// the subjects without a summary are read from their hashes.
func TestBatchReadsSummaries(t *testing.T) {
	t.Parallel()
	s, c := privateStore(t)
	ctx := context.Background()
	now := time.Now().Add(time.Minute)
	user := func(id string) Subject { return Subject{Kind: "user", ID: id} }
	if err := s.SetMultiplier(ctx, user("1"), Multiplier{Source: "admin", Value: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMultiplier(ctx, user("2"), Multiplier{Source: "velocity", Value: 0.5, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	check := func(round string, want map[int]float64) {
		t.Helper()
		res, errs := runBatch(t, s, summaryBatch(s, now))
		for i := range res {
			w, ok := want[i]
			if !ok {
				w = 10
			}
			if errs[i] != nil || res[i].Limits[1].Burst != w || res[i].Limits[0].Burst != 10 {
				t.Fatalf("%s: decision %d: user burst %v ip burst %v err=%v; want user %v", round, i, res[i].Limits[1].Burst, res[i].Limits[0].Burst, errs[i], w)
			}
		}
	}
	before := commandCalls(t, c, "exists", "hgetall", "mget")
	check("summaries", map[int]float64{1: 20, 2: 5})
	got := commandCalls(t, c, "exists", "hgetall", "mget")
	if got["exists"]-before["exists"] != 1 || got["hgetall"]-before["hgetall"] != 0 || got["mget"]-before["mget"] != 2 {
		t.Fatalf("calls before %v after %v; want 1 exists, 0 hgetall, 2 mget (buckets and locks, summaries)", before, got)
	}
	if err := c.HSet(ctx, MultiplierKey(s.Prefix(), "user", "3"), "admin", "0.5 0").Err(); err != nil {
		t.Fatal(err)
	}
	before = got
	check("a hash without a summary", map[int]float64{1: 20, 2: 5, 3: 5})
	got = commandCalls(t, c, "exists", "hgetall", "mget")
	if got["hgetall"]-before["hgetall"] != 6 {
		t.Fatalf("hgetall calls before %v after %v; want the 6 subjects without a summary read", before["hgetall"], got["hgetall"])
	}
}

// TestSummaryFollowsHash: a multiplier hash's summary is written, expires
// and goes with it, and leaves out what decisions ignore.
func TestSummaryFollowsHash(t *testing.T) {
	t.Parallel()
	s, c := privateStore(t)
	ctx := context.Background()
	sub := Subject{Kind: "device", ID: "d"}
	key := MultiplierKey(s.Prefix(), "device", "d")
	sum := key + summarySuffix
	state := func(step string, wantPairs int, wantExpiry bool) {
		t.Helper()
		v, err := c.Get(ctx, sum).Result()
		if err != nil {
			t.Fatalf("%s: summary: %v", step, err)
		}
		if len(v) != 16*wantPairs {
			t.Fatalf("%s: summary holds %d bytes, want %d pairs", step, len(v), wantPairs)
		}
		he, se := c.PExpireTime(ctx, key).Val(), c.PExpireTime(ctx, sum).Val()
		if he != se || (he > 0) != wantExpiry {
			t.Fatalf("%s: hash expires at %v, summary at %v; want the same, expiring=%v", step, he, se, wantExpiry)
		}
	}
	gone := func(step string) {
		t.Helper()
		if n := c.Exists(ctx, key, sum).Val(); n != 0 {
			t.Fatalf("%s: %d of hash and summary left, want none", step, n)
		}
	}
	soon := time.Now().Add(time.Hour)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.HSet(ctx, key, "attestation", "2 0").Err()) // a first-edition entry
	must(s.SetMultiplier(ctx, sub, Multiplier{Source: "admin", Value: 3}))
	state("never-ending admin", 1, false)
	must(s.SetMultiplier(ctx, sub, Multiplier{Source: "anomaly", Value: 0.1, ExpiresAt: soon}))
	state("admin and anomaly", 2, false)
	must(s.ClearMultiplier(ctx, sub, "admin"))
	must(s.ClearMultiplier(ctx, sub, "attestation"))
	state("anomaly alone", 1, true)
	must(s.ClearMultiplier(ctx, sub, "anomaly"))
	gone("last source cleared")
	must(s.SetMultiplier(ctx, sub, Multiplier{Source: "admin", Value: 3, ExpiresAt: soon}))
	state("admin again", 1, true)
	must(s.ClearMultiplier(ctx, sub, ""))
	gone("all cleared")
}
