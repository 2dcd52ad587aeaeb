// Command noop is the denominator of scripts/bench's limiter CPU per
// request: a net/http server that reads each request's body and answers
// 200 with a fixed JSON body and headers of the size the limiter's allowed
// answer has, deciding nothing. What it spends per request is what the
// bare HTTP exchange of /v1/check costs on the machine.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// answer is shaped like the limiter's allowed /v1/check answer.
var answer = []byte(`{"allowed":true,"limit":100000,"remaining":99998,"reset":1764590000,"policy":"ip","request_id":"01KB0000000000000000000000"}` + "\n")

var bufs = sync.Pool{New: func() any { b := make([]byte, 1024); return &b }}

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
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/", handle)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
