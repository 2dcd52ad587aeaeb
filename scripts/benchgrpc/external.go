package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// The external paths drive the same decisions with load generators in C,
// which cost the shared machine less than Go's clients:
//
//   - wrk: POST /v1/check over -c keep-alive HTTP/1.1 connections, with
//     scripts/bench.lua's bodies (scripts/bench's own HTTP client);
//   - h2load (nghttp2): the rate-limit service over -grpc-conns HTTP/2
//     connections with -c streams in flight in all, each a
//     ShouldRateLimit call of the hot key's RateLimitRequest (marshalled
//     by the generated code, in gRPC's framing). h2load sends one body,
//     so it runs in hot mode only. It counts HTTP/2 answers; the gRPC
//     status of each is checked against the limiter's
//     tollgate_rls_requests_total.
var externalPaths = map[string]bool{"wrk": true, "h2load": true}

// fullMethod is the rate-limit service's method, h2load's request path.
const fullMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// runExternal runs path p for cfg.d and summarises it as run does.
func runExternal(cfg config, p string, hot *rlsv3.RateLimitRequest) (string, error) {
	secs := strconv.Itoa(max(1, int(cfg.d.Round(time.Second)/time.Second)))
	dir, err := os.MkdirTemp("", "benchgrpc")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	var cmd *exec.Cmd
	switch p {
	case "wrk":
		cmd = exec.Command("wrk", "-t"+strconv.Itoa(min(2, cfg.c)), "-c"+strconv.Itoa(cfg.c), "-d"+secs+"s", "--latency",
			"-s", cfg.lua, cfg.httpURL, "--", cfg.mode, strconv.Itoa(cfg.pool))
	case "h2load":
		if cfg.mode != "hot" {
			return "", fmt.Errorf("benchgrpc: h2load sends one body: hot mode only")
		}
		body, err := proto.Marshal(hot)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "body"), frame(body), 0o600); err != nil {
			return "", err
		}
		streams := (cfg.c + cfg.conns - 1) / cfg.conns
		cmd = exec.Command("h2load", "-c"+strconv.Itoa(cfg.conns), "-m"+strconv.Itoa(streams), "-t"+strconv.Itoa(min(2, cfg.conns)),
			"-D", secs, "-d", filepath.Join(dir, "body"), "-H", "content-type: application/grpc", "-H", "te: trailers",
			"--log-file", filepath.Join(dir, "log"), "http://"+cfg.grpcAddr+fullMethod)
	default:
		return "", fmt.Errorf("benchgrpc: unknown path %q", p)
	}
	rls0, err := rlsAnswers(cfg.httpURL)
	if err != nil {
		return "", err
	}
	red0 := redisUse(cfg.redis)
	cpu0 := cpuTime(cfg.pid)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("benchgrpc: %s: %w\n%s", p, err, out)
	}
	took := time.Since(start)
	cpu, red := cpuTime(cfg.pid)-cpu0, redisUse(cfg.redis).since(red0)
	var r extResult
	if p == "wrk" {
		r, err = parseWrk(string(out))
	} else {
		r, err = parseH2load(string(out), filepath.Join(dir, "log"))
		if err == nil {
			var rls1 map[string]float64
			if rls1, err = rlsAnswers(cfg.httpURL); err == nil {
				ok, over := rls1["ok"]-rls0["ok"], rls1["over_limit"]-rls0["over_limit"]
				r.denied = int64(over)
				r.errors += max(0, r.n-int64(ok+over)) // answered, but not OK or OVER_LIMIT
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("benchgrpc: %s: %w\n%s", p, err, out)
	}
	return summary(cfg, r, took, cpu, red), nil
}

// extResult is what an external load generator reported.
type extResult struct {
	n, errors, denied int64
	p50, p99          float64 // µs
	took              time.Duration
}

// summary formats a run as run does; the rate is over the tool's own
// duration when it reports one.
func summary(cfg config, r extResult, took, cpu time.Duration, red redisUsage) string {
	if r.took > 0 {
		took = r.took
	}
	cpuPer := "n/a"
	if cfg.pid > 0 && r.n > 0 {
		cpuPer = strconv.FormatFloat(float64(cpu.Microseconds())/float64(r.n), 'f', 1, 64)
	}
	return fmt.Sprintf("requests=%d rps=%.0f p50_us=%.0f p99_us=%.0f errors=%d denied=%d cpu_us_per_req=%s client_cpu_us_per_req=n/a %s",
		r.n, float64(r.n)/took.Seconds(), r.p50, r.p99, r.errors, r.denied, cpuPer, red.per(cfg.redis, r.n))
}

var wrkResult = regexp.MustCompile(`BENCH_RESULT requests=(\d+) duration_us=(\d+) rps=\S+ p50_us=(\S+) p99_us=(\S+) non2xx=(\d+) connect_err=(\d+) read_err=(\d+) write_err=(\d+) timeout_err=(\d+)`)

// parseWrk reads scripts/bench.lua's BENCH_RESULT line. Non-2xx answers
// are the 429s of the hot key (denied); socket errors are errors.
func parseWrk(out string) (extResult, error) {
	m := wrkResult.FindStringSubmatch(out)
	if m == nil {
		return extResult{}, fmt.Errorf("no BENCH_RESULT line")
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(m[i], 10, 64); return v }
	p50, _ := strconv.ParseFloat(m[3], 64)
	p99, _ := strconv.ParseFloat(m[4], 64)
	return extResult{n: num(1), took: time.Duration(num(2)) * time.Microsecond, p50: p50, p99: p99,
		denied: num(5), errors: num(6) + num(7) + num(8) + num(9)}, nil
}

var h2Requests = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored`)

// parseH2load reads h2load's summary and its per-request log (start,
// status, latency in µs) for the percentiles.
func parseH2load(out, logFile string) (extResult, error) {
	m := h2Requests.FindStringSubmatch(out)
	if m == nil {
		return extResult{}, fmt.Errorf("no requests line")
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(m[i], 10, 64); return v }
	b, err := os.ReadFile(logFile)
	if err != nil {
		return extResult{}, err
	}
	var lat []float64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == "200" {
			v, _ := strconv.ParseFloat(f[2], 64)
			lat = append(lat, v)
		}
	}
	sort.Float64s(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(p*float64(len(lat)-1))]
	}
	return extResult{n: num(1), errors: num(2) + num(3), p50: pct(0.50), p99: pct(0.99)}, nil
}

// rlsAnswers reads tollgate_rls_requests_total by result from the
// limiter's /metrics (next to its /v1/check).
func rlsAnswers(checkURL string) (map[string]float64, error) {
	resp, err := http.Get(strings.TrimSuffix(checkURL, "/v1/check") + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("benchgrpc: metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("benchgrpc: metrics: %w", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, `tollgate_rls_requests_total{result="`)
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, `"} `)
		if ok {
			out[name], _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
		}
	}
	return out, nil
}
