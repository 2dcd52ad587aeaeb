// Command benchgrpc is the load generator of scripts/bench's gateway
// section: it sends the same decisions to a running limiter through
// POST /v1/check (HTTP/1.1, keep-alive) and through Envoy's rate-limit
// service (gRPC, the generated client, as Envoy sends them: descriptors
// remote_address; method + path; user_id; device_id), alternating the two
// paths for -rounds rounds (with -paths gubernator, the same four limits
// to gubernator's V1.GetRateLimits at -grpc instead, see gubernator.go;
// with -paths also through leaner load
// generators: wrk and h2load, in C, see external.go), and prints one line
// per run:
//
//	BENCH_GW path=grpc round=1 requests=N rps=X p50_us=X p99_us=X errors=N denied=N cpu_us_per_req=X client_cpu_us_per_req=X redis_scripts_per_req=X redis_cpu_us_per_req=X
//
// cpu_us_per_req is the limiter's own CPU time (user + system, from
// /proc/PID/stat of -pid) per request: on a shared machine it is the
// fairer number, since the wall rate moves with everything else running.
// client_cpu_us_per_req is this load generator's own, per request.
// redis_scripts_per_req (with -redis) is the scripts (EVALSHA and EVAL
// calls of INFO commandstats) the limiter's Redis ran per request: the
// limiter batches concurrent decisions into one EVALSHA, so it is one over
// the batches' mean size, which moves the CPU per request.
// redis_cpu_us_per_req (with -redis) is that Redis's CPU (INFO cpu, user +
// system) over the run per request: all of it, so a Redis shared with
// another busy client says nothing (scripts/bench-side runs its two builds
// in turn, the idle one costing Redis a command a second).
//
// In spread mode each request's key is drawn uniformly at random from
// -pool, as scripts/bench.lua draws it for wrk, so every path carries the
// same stream of decisions. -order cycle sends every key in turn instead
// (each revisited exactly every -pool requests): below -pool requests per
// second no bucket of scripts/bench's policy (they expire 1 s after their
// last write) is still there when its key comes back, so every decision
// creates its buckets anew.
//
// The gRPC client sends as Envoy does: many concurrent streams over few
// HTTP/2 connections (-grpc-conns, default 2: Envoy keeps one connection
// per worker thread to the rate-limit cluster), with Envoy's fixed 256 MiB
// stream and connection windows (so no BDP pings). Envoy also sends
// grpc-timeout (the filter's timeout, 20 ms by default): -grpc-timeout
// sets one; the default sends none, as the HTTP path has none.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type config struct {
	httpURL, grpcAddr, mode, order, paths, redis, lua string
	c, pool, rounds, conns, pid                       int
	d, timeout                                        time.Duration
	rate                                              float64
}

func main() {
	var cfg config
	flag.StringVar(&cfg.httpURL, "http", "", "the limiter's /v1/check URL")
	flag.StringVar(&cfg.grpcAddr, "grpc", "", "the limiter's --grpc-listen address")
	flag.StringVar(&cfg.mode, "mode", "spread", "spread: keys from a pool; hot: one key")
	flag.StringVar(&cfg.order, "order", "random", "spread mode's key order: random (uniform, as scripts/bench.lua picks) or cycle (every key in turn, each revisited every -pool requests)")
	flag.StringVar(&cfg.paths, "paths", "http,grpc", "the paths to run, in this order each round: http, grpc, gubernator (gubernator's V1.GetRateLimits at -grpc), wrk, h2load (hot mode)")
	flag.StringVar(&cfg.lua, "lua", "scripts/bench.lua", "scripts/bench.lua, for the wrk path")
	flag.IntVar(&cfg.c, "c", 16, "concurrent requests")
	flag.IntVar(&cfg.pool, "pool", 10000, "distinct (ip, user, device) keys in spread mode")
	flag.IntVar(&cfg.rounds, "rounds", 2, "rounds; each runs every path once")
	flag.IntVar(&cfg.conns, "grpc-conns", 2, "gRPC connections (Envoy keeps one per worker thread)")
	flag.IntVar(&cfg.pid, "pid", 0, "the limiter's PID, for its CPU time (0: not measured)")
	flag.DurationVar(&cfg.d, "d", 5*time.Second, "length of each run")
	flag.Float64Var(&cfg.rate, "rate", 0, "requests per second to send, paced (0: each of -c sends its next when answered)")
	flag.DurationVar(&cfg.timeout, "grpc-timeout", 0, "deadline of each gRPC call, sent as grpc-timeout (0: none)")
	flag.StringVar(&cfg.redis, "redis", "", "the limiter's Redis (host:port), for its scripts and its CPU per request (empty: not measured)")
	flag.Parse()
	if cfg.httpURL == "" || cfg.grpcAddr == "" || cfg.c < 1 || cfg.pool < 1 {
		log.Fatal("benchgrpc: -http and -grpc are required; -c and -pool must be positive")
	}
	if cfg.mode == "hot" {
		cfg.pool = 1
	}
	if cfg.order != "random" && cfg.order != "cycle" {
		log.Fatalf("benchgrpc: -order %q: want random or cycle", cfg.order)
	}
	targets, err := newTargets(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if strings.Contains(cfg.paths, "gubernator") {
		// -grpc is then gubernator's gRPC address (see gubernator.go)
		if targets["gubernator"], err = gubernatorPath(cfg); err != nil {
			log.Fatal(err)
		}
	}
	for round := 1; round <= cfg.rounds; round++ {
		for _, p := range strings.Split(cfg.paths, ",") {
			var res string
			if do, ok := targets[p]; ok {
				res = run(cfg, do)
			} else if externalPaths[p] {
				if res, err = runExternal(cfg, p, hotRequest()); err != nil {
					log.Fatal(err)
				}
			} else {
				log.Fatalf("benchgrpc: unknown path %q (want http, grpc, gubernator, wrk or h2load)", p)
			}
			fmt.Printf("BENCH_GW path=%s round=%d %s\n", p, round, res)
		}
	}
}

// doFunc sends request i (a key index) and reports whether it was denied.
type doFunc func(ctx context.Context, i int) (denied bool, err error)

func newTargets(cfg config) (map[string]doFunc, error) {
	bodies := make([][]byte, cfg.pool)
	reqs := make([]*rlsv3.RateLimitRequest, cfg.pool)
	for i := range bodies {
		ip, user, dev := key(cfg.mode, i)
		bodies[i] = []byte(fmt.Sprintf(`{"endpoint":"POST /bench","ip":"%s","user_id":"%s","device_id":"%s","cost":1}`, ip, user, dev))
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			desc("remote_address", ip), desc("method", "POST", "path", "/bench"), desc("user_id", user), desc("device_id", dev)}}
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.c, MaxConnsPerHost: cfg.c}}
	conns, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	clients := make([]rlsv3.RateLimitServiceClient, len(conns))
	for i, conn := range conns {
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	var next atomic.Uint64
	return map[string]doFunc{
		"http": func(ctx context.Context, i int) (bool, error) {
			req, _ := http.NewRequestWithContext(ctx, "POST", cfg.httpURL, bytes.NewReader(bodies[i]))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return false, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 && resp.StatusCode != 429 {
				return false, fmt.Errorf("status %d", resp.StatusCode)
			}
			return resp.StatusCode == 429, nil
		},
		"grpc": func(ctx context.Context, i int) (bool, error) {
			c := clients[next.Add(1)%uint64(len(clients))]
			ctx, cancel := callContext(ctx, cfg)
			defer cancel()
			resp, err := c.ShouldRateLimit(ctx, reqs[i])
			if err != nil {
				return false, err
			}
			return resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, nil
		},
	}, nil
}

// dial opens cfg.conns gRPC connections to cfg.grpcAddr as Envoy keeps
// them (see envoyWindow), with opts added.
func dial(cfg config, opts ...grpc.DialOption) ([]*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow)}, opts...)
	conns := make([]*grpc.ClientConn, cfg.conns)
	for i := range conns {
		c, err := grpc.NewClient(cfg.grpcAddr, opts...)
		if err != nil {
			return nil, fmt.Errorf("benchgrpc: %w", err)
		}
		conns[i] = c
	}
	return conns, nil
}

// callContext returns the context of one gRPC call: ctx with -grpc-timeout
// as its deadline, when one is set.
func callContext(ctx context.Context, cfg config) (context.Context, context.CancelFunc) {
	if cfg.timeout > 0 {
		return context.WithTimeout(ctx, cfg.timeout)
	}
	return ctx, func() {}
}

// envoyWindow is Envoy's default HTTP/2 stream and connection window
// (initial_stream_window_size, initial_connection_window_size: 256 MiB).
// A fixed window also turns off grpc-go's BDP estimation, which Envoy
// does not do: its pings would follow the answers of a busy connection.
const envoyWindow = 256 << 20

// frame is msg as one gRPC length-prefixed message (uncompressed).
func frame(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
}

// hotRequest is the hot key's RateLimitRequest, as the grpc path sends it.
func hotRequest() *rlsv3.RateLimitRequest {
	ip, user, dev := key("hot", 0)
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("remote_address", ip), desc("method", "POST", "path", "/bench"), desc("user_id", user), desc("device_id", dev)}}
}

// key is scripts/bench.lua's key i: 10.x.y.z, u_i, d_i (hot: one key).
func key(mode string, i int) (ip, user, dev string) {
	if mode == "hot" {
		return "10.255.255.1", "u_hot", "d_hot"
	}
	i++
	return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), "u_" + strconv.Itoa(i), "d_" + strconv.Itoa(i)
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// run drives do from cfg.c goroutines for cfg.d and summarises.
func run(cfg config, do doFunc) string {
	// No context deadline: gRPC fails calls at once when it thinks a
	// deadline passed, before ctx.Err() says so, and a worker would spin.
	ctx := context.Background()
	red0 := redisUse(cfg.redis)
	cpu0, self0 := cpuTime(cfg.pid), cpuTime(os.Getpid())
	start := time.Now()
	end := start.Add(cfg.d)
	var mu sync.Mutex
	var lat []time.Duration
	var errs, denied atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < cfg.c; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1<<16)
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for n := w; ; n += cfg.c {
				if cfg.rate > 0 { // request n is due at start + n/rate
					time.Sleep(time.Until(start.Add(time.Duration(float64(n) / cfg.rate * float64(time.Second)))))
				}
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				i := (n * 7919) % cfg.pool
				if cfg.order == "random" {
					i = rng.IntN(cfg.pool)
				}
				d, err := do(ctx, i)
				if err != nil {
					if errs.Add(1) == 1 {
						log.Printf("benchgrpc: first error: %v", err)
					}
					continue
				}
				if d {
					denied.Add(1)
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	took := time.Since(start)
	cpu, self := cpuTime(cfg.pid)-cpu0, cpuTime(os.Getpid())-self0
	red := redisUse(cfg.redis).since(red0)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds())
	}
	n := len(lat)
	cpuPer, selfPer := "n/a", "n/a"
	if cfg.pid > 0 && n > 0 {
		cpuPer = strconv.FormatFloat(float64(cpu.Microseconds())/float64(n), 'f', 1, 64)
	}
	if n > 0 {
		selfPer = strconv.FormatFloat(float64(self.Microseconds())/float64(n), 'f', 1, 64)
	}
	return fmt.Sprintf("requests=%d rps=%.0f p50_us=%.0f p99_us=%.0f errors=%d denied=%d cpu_us_per_req=%s client_cpu_us_per_req=%s %s",
		n, float64(n)/took.Seconds(), pct(0.50), pct(0.99), errs.Load(), denied.Load(), cpuPer, selfPer, red.per(cfg.redis, int64(n)))
}

// redisUsage is what the limiter's Redis has done: the scripts it has
// run (the calls of EVALSHA and EVAL in INFO commandstats) and its CPU
// time (used_cpu_user + used_cpu_sys in INFO cpu).
type redisUsage struct {
	scripts int64
	cpu     time.Duration
}

// redisUse reads Redis at addr's usage (zero when addr is empty).
func redisUse(addr string) redisUsage {
	if addr == "" {
		return redisUsage{}
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		log.Fatalf("benchgrpc: redis %s: %v", addr, err)
	}
	var u redisUsage
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval":
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			u.scripts += n
		case "used_cpu_user", "used_cpu_sys":
			secs, _ := strconv.ParseFloat(rest, 64)
			u.cpu += time.Duration(secs * float64(time.Second))
		}
	}
	return u
}

// since is the usage between before and u.
func (u redisUsage) since(before redisUsage) redisUsage {
	return redisUsage{u.scripts - before.scripts, u.cpu - before.cpu}
}

// per formats u per request of n as the BENCH_GW line's two Redis fields
// (n/a when addr is empty: not measured).
func (u redisUsage) per(addr string, n int64) string {
	scripts, cpu := "n/a", "n/a"
	if addr != "" && n > 0 {
		scripts = strconv.FormatFloat(float64(u.scripts)/float64(n), 'f', 3, 64)
		cpu = strconv.FormatFloat(float64(u.cpu.Microseconds())/float64(n), 'f', 1, 64)
	}
	return "redis_scripts_per_req=" + scripts + " redis_cpu_us_per_req=" + cpu
}

// cpuTime is the user + system CPU time of process pid (0 when pid is 0
// or unreadable), from /proc/PID/stat (fields 14 and 15, in clock ticks
// of 1/100 s, the USER_HZ of Linux on every common architecture).
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}
