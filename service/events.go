package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// events is the limiter's NATS side: the publisher, and in the
// one-process default the embedded server and risk daemon.
type events struct {
	url       string
	nc        *nats.Conn
	publisher *streams.Publisher
	offenders func(ctx context.Context) ([]signals.Offender, error)
	close     func()
}

func (e *events) state() string {
	if e.nc != nil && e.nc.IsConnected() {
		return "up"
	}
	return "down"
}

// offendersKey holds riskd's offender list (JSON) for the limiter to serve.
func offendersKey(prefix string) string { return bucket.OffendersKey(prefix) }

// startEvents connects to NATS (or starts the embedded server and risk
// engine) and returns the publisher.
func startEvents(ctx context.Context, cfg Config, log *slog.Logger, reg prometheus.Registerer, store bucket.Store, rc redis.UniversalClient, holder *policy.Holder) (*events, error) {
	dropped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_events_dropped_total",
		Help: "Decision events dropped instead of published (queue full, NATS down, publish failed).",
	})
	reg.MustRegister(dropped)
	e := &events{url: cfg.NATSURL}
	var closers []func()
	e.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	embedded := cfg.NATSURL == ""
	if embedded {
		dir, err := os.MkdirTemp("", "tollgate-nats-")
		if err != nil {
			return nil, fmt.Errorf("service: nats temp dir: %w", err)
		}
		closers = append(closers, func() { _ = os.RemoveAll(dir) })
		srv, err := streams.StartEmbedded(dir, cfg.NATSPort)
		if err != nil {
			e.close()
			return nil, err
		}
		closers = append(closers, srv.Stop)
		e.url = srv.URL
	}
	// One dial first, for its real cause: the retrying connection below
	// would only report "outbound buffer limit exceeded" for the streams.
	reachable := embedded || dialNATSOnce(log, e.url, "decisions and reports are dropped (and counted) until it answers")
	nc, err := streams.Connect(e.url, "tollgate-limiter")
	if err != nil {
		e.close()
		return nil, err
	}
	e.nc = nc
	closers = append(closers, nc.Close)
	scfg := streams.Config{Prefix: cfg.SubjectPrefix, Name: cfg.StreamName, DecisionsMaxBytes: cfg.DecisionsMaxBytes,
		DecisionsMaxAge: cfg.DecisionsMaxAge, EventsMaxBytes: cfg.EventsMaxBytes}
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{Config: scfg, OnDrop: func(n int) { dropped.Add(float64(n)) }})
	if err != nil {
		e.close()
		return nil, err
	}
	e.publisher = pub
	closers = append(closers, pub.Close)
	if reachable {
		err = ensureStreams(ctx, pub, scfg)
	}
	if err != nil {
		// The limiter never waits on NATS: it starts, drops and counts
		// events, and riskd creates the streams when NATS is back.
		log.Warn("nats streams not ensured; decisions are dropped until NATS answers", "err", err)
	}

	if !embedded {
		if rc != nil {
			e.offenders = func(ctx context.Context) ([]signals.Offender, error) {
				v, err := rc.Get(ctx, offendersKey(cfg.KeyPrefix)).Bytes()
				if errors.Is(err, redis.Nil) {
					return nil, nil
				}
				if err != nil {
					return nil, fmt.Errorf("service: read offenders: %w", err)
				}
				var list []signals.Offender
				if err := json.Unmarshal(v, &list); err != nil {
					return nil, fmt.Errorf("service: decode offenders: %w", err)
				}
				return list, nil
			}
		}
		return e, nil
	}

	metrics := risk.NewMetrics(reg)
	newDaemon := func() (*risk.Daemon, error) {
		o := risk.Options{
			Publisher: pub, Store: store, Policy: holder.Current, Streams: scfg,
			Metrics: metrics, Logger: cfg.Logger.With("component", "riskd"),
		}
		if rc != nil {
			o.StoreLost = storeLost(rc, bucket.StoreEpochKey(cfg.KeyPrefix, "riskd"))
		}
		return risk.New(o)
	}
	d, err := newDaemon()
	if err != nil {
		e.close()
		return nil, err
	}
	var cur atomic.Pointer[risk.Daemon]
	cur.Store(d)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A daemon that fails (a consumer gone) is started again: the
		// one-process limiter never keeps a half-deaf risk engine.
		for d := d; ; {
			err := d.Run(rctx)
			if rctx.Err() != nil {
				return
			}
			log.Error("risk engine stopped; restarting it", "err", err)
			select {
			case <-rctx.Done():
				return
			case <-time.After(time.Second):
			}
			if nd, err := newDaemon(); err == nil {
				d = nd
				cur.Store(d)
			}
		}
	}()
	closers = append(closers, func() { stop(); <-done })
	select {
	case <-d.Ready():
	case <-done:
	case <-time.After(10 * time.Second):
		log.Warn("risk engine not ready after 10s; continuing")
	}
	e.offenders = func(context.Context) ([]signals.Offender, error) { return cur.Load().Offenders(), nil }
	return e, nil
}

// ensureStreams creates or updates the streams, waiting up to 5s.
func ensureStreams(ctx context.Context, pub *streams.Publisher, scfg streams.Config) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return streams.EnsureStreams(sctx, pub.JetStream(), scfg)
}
