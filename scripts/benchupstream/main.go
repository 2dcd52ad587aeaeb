// Command benchupstream is the upstream API of scripts/bench-proxy: it
// answers every request with a small JSON body, as a fast API would. With
// -proxy URL it is instead a bare httputil.ReverseProxy to URL: the
// baseline of what any Go reverse-proxy hop costs on the machine, on the
// limiter's tuned net/http Transport (api.NewUpstreamTransport).
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/tollgate-dev/tollgate/api"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "address")
	delay := flag.Duration("delay", 0, "time each answer takes, as a real API's work would")
	proxy := flag.String("proxy", "", "be a bare reverse proxy to this URL instead")
	flag.Parse()
	if *proxy != "" {
		u, err := url.Parse(*proxy)
		if err != nil {
			log.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = api.NewUpstreamTransport()
		srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: 5 * time.Second}
		log.Fatal(srv.ListenAndServe())
	}
	body := []byte(`{"ok":true,"items":[1,2,3]}` + "\n")
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if *delay > 0 {
				time.Sleep(*delay)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}),
	}
	log.Fatal(srv.ListenAndServe())
}
