package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/alerting"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// riskConfig configures the risk component: riskd's daemon, run by
// cmd/riskd under a leadership lease and by the one-process limiter
// without one.
type riskConfig struct {
	// Publisher, Store and Policy are the daemon's (required).
	Publisher *streams.Publisher
	Store     risk.Writer
	// TrustScanner lists the store's trust sets (risk.Options.TrustScanner):
	// the store beneath Store when Store wraps it (the limiter's L1 cache).
	TrustScanner bucket.TrustScanner
	Policy       func() *policy.Policy
	// Redis is the store's client (nil with the memory store): it keeps
	// the store-epoch marker, the lease and the shared offender list.
	Redis redis.UniversalClient
	// KeyPrefix, Streams and Durable must match the limiters'.
	KeyPrefix string
	Streams   streams.Config
	Durable   string
	// Reassert is how often active measures are written again (0: the daemon's default).
	Reassert time.Duration
	// LeaseTTL, when > 0, runs the daemon only while this process holds
	// the leadership lease in Redis (riskd); 0 runs it at once (one process).
	LeaseTTL time.Duration
	// ShareOffenders writes the offender list to Redis for the limiters'
	// admin API (riskd); else Offenders serves it from this process.
	ShareOffenders bool
	Registerer     prometheus.Registerer
	Logger         *slog.Logger
	// Getenv reads the alerting webhooks' secrets (default os.Getenv).
	Getenv func(string) string
}

// Validate checks that the daemon's parts are there and that a lease or
// a shared offender list has Redis.
func (c riskConfig) Validate() error {
	if c.Publisher == nil || c.Store == nil || c.Policy == nil || c.Registerer == nil || c.Logger == nil {
		return errors.New("service: risk: publisher, store, policy, registerer and logger are required")
	}
	if (c.LeaseTTL > 0 || c.ShareOffenders) && c.Redis == nil {
		return errors.New("service: risk: a lease or a shared offender list needs redis")
	}
	return nil
}

// riskComponent runs the risk daemon. A daemon that fails (a consumer
// gone) ends Run with its error: the process stops rather than run
// half-deaf (6.7).
type riskComponent struct {
	c       riskConfig
	metrics *risk.Metrics
	lease   *risk.Lease // nil: no lease
	leader  atomic.Bool
	cur     atomic.Pointer[risk.Daemon] // the daemon in force (nil while standing by)
	failure atomic.Pointer[string]      // why the daemon stopped
	alerts  *alerting.Deliverer         // runs beside the daemon in force
	// trust is the record of trusted devices every daemon of the process
	// shares: a Redis that restarts empty ends the lease, and the next
	// leadership's daemon must still know the enrolments older than the
	// events stream (7.1)
	trust *risk.TrustRecord
}

var _ component = (*riskComponent)(nil)

// newRisk validates c and builds one daemon (to check its options).
func newRisk(c riskConfig) (*riskComponent, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Durable == "" {
		c.Durable = DefaultDurable
	}
	r := &riskComponent{c: c, metrics: risk.NewMetrics(c.Registerer), trust: risk.NewTrustRecord(0)}
	if c.LeaseTTL > 0 {
		r.lease = risk.NewLease(c.Redis, bucket.LeaderKey(c.KeyPrefix, c.Durable), ulid.Make().String(), c.LeaseTTL)
	}
	d, err := r.newDaemon()
	if err != nil {
		return nil, err
	}
	if r.alerts, err = newAlertDeliverer(c, r.leading); err != nil {
		return nil, err
	}
	if r.lease == nil {
		r.cur.Store(d)
		r.leader.Store(true)
	}
	return r, nil
}

// newDaemon builds a daemon of c.
func (r *riskComponent) newDaemon() (*risk.Daemon, error) {
	c := r.c
	o := risk.Options{
		Publisher: c.Publisher, Store: c.Store, Policy: c.Policy, Streams: c.Streams, Durable: c.Durable,
		Metrics: r.metrics, Logger: c.Logger, Reassert: c.Reassert, Trust: r.trust, TrustScanner: c.TrustScanner,
	}
	if r.lease != nil {
		o.Leading, o.LeadingUntil = r.lease.Valid, r.lease.Until
	}
	if c.Redis != nil {
		o.StoreLost = storeLost(c.Redis, bucket.StoreEpochKey(c.KeyPrefix, c.Durable))
	}
	if c.ShareOffenders {
		o.OffenderSink = func(ctx context.Context, list []signals.Offender) error {
			b, err := json.Marshal(list)
			if err != nil {
				return err
			}
			return c.Redis.Set(ctx, offendersKey(c.KeyPrefix), b, offendersTTL).Err()
		}
	}
	return risk.New(o)
}

// Run runs the daemon until ctx ends: at once without a lease, else
// whenever this process holds it, standing by while another does.
func (r *riskComponent) Run(ctx context.Context) error {
	if r.lease == nil {
		return r.serve(ctx, r.cur.Load())
	}
	for {
		r.standBy()
		if err := r.lease.Acquire(ctx, leasePoll); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("acquire lease: %w", err)
		}
		r.leader.Store(true)
		r.metrics.Leader.Set(1)
		r.c.Logger.Info("leadership acquired; replaying state")
		if err := r.lead(ctx); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// lead runs a new daemon while the lease is held. It returns nil when ctx
// ends or the lease is lost (the caller stands by again), the daemon's
// error when it fails. The lease is released only once the daemon (and
// its alert delivery) has stopped, so the message it finishes on its way
// out is finished by the leader, and never also by the next one
// (risk.Lease.Lead).
func (r *riskComponent) lead(ctx context.Context) error {
	d, err := r.newDaemon()
	if err != nil {
		return err
	}
	err = r.lease.Lead(ctx, func(ctx context.Context) error {
		// not the leader from the moment the daemon is told to stop (the
		// lease lost, or riskd stopping): it acts on nothing new, and a
		// Redis call that stalls does not keep it reported as leading
		defer context.AfterFunc(ctx, r.standBy)()
		return r.serve(ctx, d)
	})
	r.standBy()
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, risk.ErrLeaseLost):
		// the daemon stopped acting when the lease turned invalid; what
		// it held waits for the next leader
		r.c.Logger.Warn("leadership lost; standing by", "err", err)
		return nil
	case errors.Is(err, risk.ErrNotLeading):
		r.c.Logger.Warn("leadership lease not renewed in time; stopped acting, standing by")
		return nil
	}
	return err
}

// standBy reports this process as not leading (readiness, metric).
func (r *riskComponent) standBy() {
	r.leader.Store(false)
	r.metrics.StandBy()
}

// leading reports whether this process may act now: it holds a valid
// lease (or runs without one). What delivers riskd's decisions outside
// the daemon asks it before each delivery.
func (r *riskComponent) leading() bool {
	return r.lease == nil || r.lease.Valid()
}

// serve runs d until ctx ends or d fails; a daemon that returns before
// ctx ends has failed.
func (r *riskComponent) serve(ctx context.Context, d *risk.Daemon) error {
	r.cur.Store(d)
	defer r.cur.Store(nil)
	defer deliverAlerts(ctx, r.alerts, r.c.Logger)() // only the daemon in force delivers
	err := d.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, risk.ErrNotLeading) {
		return err // not a failure: lead stands by again
	}
	if err == nil {
		err = errors.New("risk: daemon stopped")
	}
	msg := err.Error()
	r.failure.Store(&msg)
	r.c.Logger.Error("risk daemon failed; stopping", "err", msg)
	return err
}

// status is riskd's readiness: "standby", "starting" (leading, replaying)
// or "ready"; failure is why the daemon stopped ("" while it runs).
func (r *riskComponent) status() (status, role, failure string) {
	if f := r.failure.Load(); f != nil {
		failure = *f
	}
	if !r.leader.Load() {
		return "standby", "standby", failure
	}
	if d := r.cur.Load(); d != nil {
		select {
		case <-d.Ready():
			return "ready", "leader", failure
		default:
		}
	}
	return "starting", "leader", failure
}

// ready is closed once the daemon in force has replayed and consumes
// (never, while standing by).
func (r *riskComponent) ready() <-chan struct{} {
	if d := r.cur.Load(); d != nil {
		return d.Ready()
	}
	return nil
}

// offenders serves GET /v1/admin/offenders from this process's daemon.
func (r *riskComponent) offenders(context.Context) ([]signals.Offender, error) {
	if d := r.cur.Load(); d != nil {
		return d.Offenders(), nil
	}
	return nil, nil
}

// storeLost returns a risk.Options.StoreLost over rc: it keeps a marker
// key in Redis and reports true whenever the marker is missing (a Redis
// that restarted empty, or the first call). On a Redis Cluster it keeps
// one marker in each slot range of the cluster's slot map (clusterMarkers),
// so that a single master that restarted empty is seen too: the trusted
// devices riskd writes back only on a loss live on every master.
// The function it returns is called from one goroutine at a time
// (riskd's housekeeping).
func storeLost(rc redis.UniversalClient, key string) func(ctx context.Context) (bool, error) {
	cc, _ := rc.(*redis.ClusterClient)
	tags := map[int]string{} // slot -> its marker's hash tag
	return func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, storeLostTimeout)
		defer cancel()
		keys := []string{key}
		if cc != nil {
			slots, err := cc.ClusterSlots(ctx).Result()
			if err != nil {
				return false, err
			}
			keys = clusterMarkers(key, slots, tags)
		}
		lost := false
		for _, k := range keys {
			n, err := rc.Exists(ctx, k).Result()
			if err != nil {
				return false, err
			}
			if n == 1 {
				continue
			}
			if err := rc.Set(ctx, k, time.Now().UTC().Format(time.RFC3339), 0).Err(); err != nil {
				return false, err
			}
			lost = true
		}
		return lost, nil
	}
}

// clusterMarkers returns one marker key per slot range of slots: key and
// a hash tag that hashes to the range's first slot ({0}, {1}, ...: the
// first number that does; tags caches them by slot). A range that moves
// to another master, or a master that restarts empty, is missing its
// marker.
func clusterMarkers(key string, slots []redis.ClusterSlot, tags map[int]string) []string {
	out := make([]string, 0, len(slots))
	for _, r := range slots {
		tag, ok := tags[r.Start]
		if !ok {
			tag = slotTag(r.Start)
			tags[r.Start] = tag
		}
		out = append(out, key+":{"+tag+"}")
	}
	return out
}

// slotTag returns the first decimal number that hashes to slot (every
// slot has one below 2^20: TestSlotTagsCoverEverySlot).
func slotTag(slot int) string {
	for i := 0; i < 1<<20; i++ {
		if tag := strconv.Itoa(i); int(bucket.Slot(tag)) == slot {
			return tag
		}
	}
	return "" // no slot's: the marker then lives in the key's own slot
}
