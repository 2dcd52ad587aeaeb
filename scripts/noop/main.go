// Command noop is the denominator of scripts/bench's limiter CPU per
// request: a net/http server that reads each request's body and answers
// 200 with a fixed JSON body and headers of the size the limiter's allowed
// answer has, deciding nothing. What it spends per request is what the
// bare HTTP exchange of /v1/check costs on the machine.
//
// With -redis ADDR -script FILE it also runs the Lua script of FILE (the
// raw one-key token bucket, bucket/testdata/raw_bucket.lua) on Redis once
// per request, through go-redis, before answering: the bare HTTP exchange
// plus one Redis round trip, which shows what waiting on Redis costs a
// net/http server on the machine, decision logic aside.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// answer is shaped like the limiter's allowed /v1/check answer.
var answer = []byte(`{"allowed":true,"limit":100000,"remaining":99998,"reset":1764590000,"policy":"ip","request_id":"01KB0000000000000000000000"}` + "\n")

var bufs = sync.Pool{New: func() any { b := make([]byte, 1024); return &b }}

// rdb and script, when set (-redis, -script), are run once per request.
var (
	rdb    *redis.Client
	script *redis.Script
	seq    atomic.Uint64
)

func handle(w http.ResponseWriter, r *http.Request) {
	bp := bufs.Get().(*[]byte)
	for {
		if _, err := r.Body.Read(*bp); err != nil {
			if err != io.EOF {
				http.Error(w, "bad body", http.StatusBadRequest)
				bufs.Put(bp)
				return
			}
			break
		}
	}
	bufs.Put(bp)
	if rdb != nil {
		key := "noop:" + strconv.FormatUint(seq.Add(1)%10000, 10)
		if err := script.Run(r.Context(), rdb, []string{key}, 100000, 100000).Err(); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(answer))}
	h["X-Request-Id"] = []string{"01KB0000000000000000000000"}
	h["X-Ratelimit-Limit"] = []string{"100000"}
	h["X-Ratelimit-Remaining"] = []string{"99998"}
	h["X-Ratelimit-Reset"] = []string{"1"}
	h["Ratelimit"] = []string{`"ip";r=99998;t=1`}
	h["Ratelimit-Policy"] = []string{`"ip";q=100000;w=1`}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(answer)
}

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "address to listen on (loopback)")
	redisAddr := flag.String("redis", "", "run -script on this Redis (host:port) once per request")
	scriptFile := flag.String("script", "", "the Lua script -redis runs (one key, ARGV rate and burst)")
	redisDB := flag.Int("redis-db", 0, "the database of -redis its keys go to")
	flag.Parse()
	if *redisAddr != "" {
		src, err := os.ReadFile(*scriptFile)
		if err != nil {
			log.Fatalf("noop: -script: %v", err)
		}
		rdb, script = redis.NewClient(&redis.Options{Addr: *redisAddr, DB: *redisDB}), redis.NewScript(string(src))
		if err := script.Load(context.Background(), rdb).Err(); err != nil {
			log.Fatalf("noop: load script: %v", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", handle)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
