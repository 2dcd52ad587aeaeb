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

	mu     sync.Mutex // guards db, path, cancel
	db     *reputation.DB
	path   string
	cancel context.CancelFunc
	every  time.Duration
}

func newReputationState(log *slog.Logger, reg prometheus.Registerer, every time.Duration) *reputationState {
	r := &reputationState{log: log, every: every, reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_asn_database_reloads_total",
		Help: "ASN database reloads by result (ok, error); a refused file keeps the database in force.",
	}, []string{"result"})}
	reg.MustRegister(r.reloads)
	return r
}

// Current returns the rules in force (nil without a reputation section).
func (r *reputationState) Current() *reputation.Rules { return r.rules.Load() }

// apply builds the rules of p; the database is opened (and watched) when
// its path is new. An unreadable database is an error: at start the
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
		if r.cancel != nil {
			r.cancel()
			r.cancel = nil
		}
		if r.db != nil {
			_ = r.db.Close()
		}
		r.db, r.path = db, rep.ASNDatabase
		if db != nil {
			ctx, cancel := context.WithCancel(context.Background())
			r.cancel = cancel
			go db.Watch(ctx, r.every, func(changed bool, err error) {
				if err != nil {
					r.reloads.WithLabelValues("error").Inc()
					r.log.Error("ASN database refused; the old one stays", "path", rep.ASNDatabase, "err", err)
					return
				}
				if changed {
					r.reloads.WithLabelValues("ok").Inc()
					r.log.Info("ASN database reloaded", "path", rep.ASNDatabase, "build", db.Info().BuildTime)
				}
			})
		}
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

// close stops the watcher and closes the database.
func (r *reputationState) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
	}
	if r.db != nil {
		_ = r.db.Close()
	}
}
