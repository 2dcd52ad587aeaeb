package service

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// watchConfig configures the policy watcher (a changed policy file is
// reloaded) and the list watcher (changed allow/deny list files are
// reloaded).
type watchConfig struct {
	// Holder holds the policy (required); Path is its file ("": the
	// built-in policy, which never reloads and names no lists).
	Holder *policy.Holder
	Path   string
	// Interval is how often both look (<= 0: policy.DefaultWatchInterval).
	Interval time.Duration
	Logger   *slog.Logger
}

// Validate checks that a holder and a logger are given.
func (c watchConfig) Validate() error {
	if c.Holder == nil || c.Logger == nil {
		return errors.New("service: watchers: holder and logger are required")
	}
	return nil
}

// addWatchers adds the policy watcher and the list watcher of c to g
// (none for the built-in policy).
func addWatchers(g *group, c watchConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Path == "" {
		return nil
	}
	if c.Interval <= 0 {
		c.Interval = policy.DefaultWatchInterval
	}
	g.add("policy watcher", componentFunc(func(ctx context.Context) error {
		every(ctx, c.Interval, func() {
			if changed, err := c.Holder.CheckOnce(); err != nil && !changed {
				c.Logger.Warn("policy: cannot check policy file", "file", c.Path, "error", err.Error())
			}
		})
		return nil
	}))
	g.add("list watcher", componentFunc(func(ctx context.Context) error {
		every(ctx, c.Interval, func() { c.Holder.CheckListsOnce() })
		return nil
	}))
	return nil
}
