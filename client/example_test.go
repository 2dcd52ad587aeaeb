package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/client"
)

func ExampleTransport() {
	// A server that rate-limits the first request.
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintln(w, `{"error":{"code":"RATE_LIMITED","message":"Too many requests","details":{"retry_after_ms":1800}}}`)
			return
		}
		fmt.Fprintln(w, "hello")
	}))
	defer srv.Close()

	rt := client.NewTransport(nil)
	// In an app, leave Sleep and Rand alone; here they show the wait.
	rt.Rand = func() float64 { return 0.5 }
	rt.Sleep = func(ctx context.Context, d time.Duration) error {
		fmt.Println("waiting", d)
		return nil
	}
	c := &http.Client{Transport: rt, Timeout: time.Minute}

	resp, err := c.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output:
	// waiting 1.9s
	// 200 hello
}
