package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
)

// reputationState keeps the reputation rules of the policy in force and
// the ASN database they use, rebuilt on policy reload and swapped when the
// database file changes.
type reputationState struct {
	log     *slog.Logger
	reloads *prometheus.CounterVec
	rules   atomic.Pointer[reputation.Rules]

	mu    sync.Mutex // guards db, path
	db    *reputation.DB
	path  string
	every time.Duration
}

var _ component = (*reputationState)(nil)

func newReputationState(log *slog.Logger, reg prometheus.Registerer, every time.Duration) *reputationState {
	if every <= 0 {
		every = DefaultASNWatchInterval
	}
	r := &reputationState{log: log, every: every, reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_asn_database_reloads_total",
		Help: "ASN database reloads by result (ok, error); a refused file keeps the database in force.",
	}, []string{"result"})}
	reg.MustRegister(r.reloads)
	return r
}

// Current returns the rules in force (nil without a reputation section).
func (r *reputationState) Current() *reputation.Rules { return r.rules.Load() }

// apply builds the rules of p; the database is opened when its path is
// new (Run watches the one in force). An unreadable database is an error: at start the
// limiter refuses to run, on reload the old rules stay.
func (r *reputationState) apply(p *policy.Policy) error {
	rep := p.Risk.Reputation
	if rep == nil {
		r.rules.Store(nil)
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep.ASNDatabase != r.path {
		var db *reputation.DB
		if rep.ASNDatabase != "" {
			var err error
			if db, err = reputation.OpenDB(rep.ASNDatabase); err != nil {
				return err // "reputation: ... ASN database PATH: ..." already
			}
			info := db.Info()
			r.log.Info("ASN database loaded", "path", rep.ASNDatabase, "build", info.BuildTime, "nodes", info.NodeCount)
		}
		if r.db != nil {
			_ = r.db.Close()
		}
		r.db, r.path = db, rep.ASNDatabase
	}
	rules := reputation.New(rep, r.db)
	// The built-in policy's ASN rule is an example that needs a database
	// only an operator can supply: not worth a warning on a clean start.
	level := slog.LevelWarn
	if p.Source == "" {
		level = slog.LevelInfo
	}
	for _, msg := range rules.Inactive() {
		r.log.Log(context.Background(), level, "reputation rule inactive", "rule", msg)
	}
	r.rules.Store(rules)
	return nil
}

// Run is the ASN watcher: every interval it reloads the database in
// force if its file changed (a refused file keeps the old one; a failure
// that repeats for the same file is logged once). When ctx ends it closes
// the database.
func (r *reputationState) Run(ctx context.Context) error {
	var (
		last    *reputation.DB
		lastErr error
	)
	every(ctx, r.every, func() {
		r.mu.Lock()
		db, path := r.db, r.path
		r.mu.Unlock()
		if db == nil {
			return
		}
		if db != last {
			last, lastErr = db, nil
		}
		changed, err := db.Reload()
		switch {
		case errors.Is(err, reputation.ErrClosed): // swapped by a reload meanwhile
		case err != nil && err != lastErr:
			r.reloads.WithLabelValues("error").Inc()
			r.log.Error("ASN database refused; the old one stays", "path", path, "err", err)
		case changed:
			r.reloads.WithLabelValues("ok").Inc()
			r.log.Info("ASN database reloaded", "path", path, "build", db.Info().BuildTime)
		}
		lastErr = err
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.db != nil {
		_ = r.db.Close()
		r.db, r.path = nil, ""
	}
	return nil
}
