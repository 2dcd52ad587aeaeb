package service

import (
	"context"
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

	mu    sync.Mutex // guards db, path, swap
	db    *reputation.DB
	path  string
	swap  chan struct{} // closed (and replaced) when apply swaps db
	every time.Duration
}

var _ component = (*reputationState)(nil)

func newReputationState(log *slog.Logger, reg prometheus.Registerer, every time.Duration) *reputationState {
	if every <= 0 {
		every = DefaultASNWatchInterval
	}
	r := &reputationState{log: log, every: every, swap: make(chan struct{}), reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_asn_database_reloads_total",
		Help: "ASN database reloads by result (ok, error); a refused file keeps the database in force.",
	}, []string{"result"})}
	reg.MustRegister(r.reloads)
	return r
}

// Current returns the rules in force (nil without a reputation section).
func (r *reputationState) Current() *reputation.Rules { return r.rules.Load() }

// inUse is the path of the ASN database in force ("" for none).
func (r *reputationState) inUse() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.path
}

// apply builds the rules of p; the database is opened when its path is
// new (Run watches the one in force). An unreadable database is an error: at start the
// limiter refuses to run; a reload whose database does not open is
// refused before it takes effect (the holder's Check), so apply fails on
// reload only if the file changed in between, and the old rules stay.
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
		close(r.swap)
		r.swap = make(chan struct{})
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

// Run is the ASN watcher: it runs reputation.DB.Watch on the database in
// force (a refused file keeps the old one; a failure that repeats for the
// same file is reported once) and moves to the new one when a policy
// reload swaps it. When ctx ends it closes the database.
func (r *reputationState) Run(ctx context.Context) error {
	defer r.closeDB()
	for ctx.Err() == nil {
		r.mu.Lock()
		db, path, swap := r.db, r.path, r.swap
		r.mu.Unlock()
		if db == nil {
			select {
			case <-swap:
			case <-ctx.Done():
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-swap:
				cancel()
			case <-wctx.Done():
			}
		}()
		db.Watch(wctx, r.every, func(changed bool, err error) { r.report(path, db, changed, err) })
		cancel()
	}
	return nil
}

// report logs and counts what DB.Watch saw of the database at path.
func (r *reputationState) report(path string, db *reputation.DB, changed bool, err error) {
	switch {
	case err != nil:
		r.reloads.WithLabelValues("error").Inc()
		r.log.Error("ASN database refused; the old one stays", "path", path, "err", err)
	case changed:
		r.reloads.WithLabelValues("ok").Inc()
		r.log.Info("ASN database reloaded", "path", path, "build", db.Info().BuildTime)
	}
}

// closeDB closes the database in force.
func (r *reputationState) closeDB() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.db != nil {
		_ = r.db.Close()
		r.db, r.path = nil, ""
	}
}
