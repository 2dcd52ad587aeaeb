// Command benchrecord records synthetic mobile traffic into Tollgate's
// JetStream streams, as limiters would publish it, for scripts/bench-replay:
// decisions of 10,000 users and their devices (reads, writes, searches,
// logins of 2,000 accounts) in batches of up to 256 per class, and a
// login_failed or login_succeeded report for every 20th login.
//
//	benchrecord -nats URL [-events 1000000] [-rate 5000]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/streams"
)

func main() {
	url := flag.String("nats", "", "NATS server URL")
	n := flag.Int("events", 1_000_000, "decision events to record")
	rate := flag.Int("rate", 5000, "recorded requests per second (event-time spacing)")
	flag.Parse()
	if err := record(*url, *n, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "benchrecord:", err)
		os.Exit(1)
	}
}

type route struct{ endpoint, class string }

var routes = []route{{"GET /feed", "read"}, {"GET /items/7", "read"}, {"POST /items", "write"},
	{"GET /search?q=x", "expensive"}, {"POST /auth/login", "auth"}}

func record(url string, n, rate int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		return err
	}
	ctx := context.Background()
	cfg := streams.Config{DecisionsMaxBytes: 2 << 30}
	if err := streams.EnsureStreams(ctx, js, cfg); err != nil {
		return err
	}
	// on a loaded machine the server may fall behind for a while: wait for
	// acknowledgements instead of failing after the default 200 ms
	stall := jetstream.WithStallWait(30 * time.Second)
	step := time.Second / time.Duration(rate)
	t0 := time.Now().UTC().Add(-time.Duration(n) * step)
	batches := map[string][]streams.Decision{}
	flush := func(class string) error {
		data, err := json.Marshal(streams.DecisionBatch{V: streams.SchemaVersion, Decisions: batches[class]})
		if err != nil {
			return err
		}
		batches[class] = batches[class][:0]
		_, err = js.PublishAsync(streams.DefaultPrefix+"decisions."+class, data, stall)
		return err
	}
	reports := 0
	for i := range n {
		rt := routes[i%len(routes)]
		u := strconv.Itoa(i * 7919 % 10000)
		ts := t0.Add(time.Duration(i) * step)
		d := streams.Decision{TS: ts, RequestID: "r" + strconv.Itoa(i), Endpoint: rt.endpoint, Class: rt.class,
			Allowed: true, Result: "allowed", IP: "198.51." + strconv.Itoa(i%200) + "." + strconv.Itoa(i%250),
			DeviceID: "d_" + u, Cost: 1}
		if rt.class == "auth" {
			d.Account = "acct_" + strconv.Itoa(i%2000)
			if i%100 == 4 {
				typ := streams.ReportLoginFailed
				if i%300 == 4 {
					typ = streams.ReportLoginSucceeded
				}
				r := streams.Report{V: streams.SchemaVersion, ID: "rep" + strconv.Itoa(i), TS: ts.Add(time.Millisecond),
					Type: typ, Source: "api", Account: d.Account, IP: d.IP}
				data, _ := json.Marshal(r)
				if _, err := js.PublishAsync(streams.DefaultPrefix+"reports."+typ, data, stall); err != nil {
					return err
				}
				reports++
			}
		} else {
			d.UserID = "u_" + u
		}
		batches[rt.class] = append(batches[rt.class], d)
		if len(batches[rt.class]) == 256 {
			if err := flush(rt.class); err != nil {
				return err
			}
		}
	}
	for _, r := range routes {
		if len(batches[r.class]) > 0 {
			if err := flush(r.class); err != nil {
				return err
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("publishes not acknowledged within a minute")
	}
	fmt.Printf("recorded %d decisions and %d reports\n", n, reports)
	return nil
}
