package service

import (
	"context"
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

// addWatchers adds the policy watcher (a changed policy file is reloaded)
// and the list watcher (changed allow/deny list files are reloaded) to
// g, both checking every interval (<= 0: policy.DefaultWatchInterval).
// The built-in policy (path "") is never reloaded and names no lists.
func addWatchers(g *group, holder *policy.Holder, path string, interval time.Duration, log *slog.Logger) {
	if path == "" {
		return
	}
	if interval <= 0 {
		interval = policy.DefaultWatchInterval
	}
	g.add("policy watcher", componentFunc(func(ctx context.Context) error {
		every(ctx, interval, func() {
			if changed, err := holder.CheckOnce(); err != nil && !changed {
				log.Warn("policy: cannot check policy file", "file", path, "error", err.Error())
			}
		})
		return nil
	}))
	g.add("list watcher", componentFunc(func(ctx context.Context) error {
		every(ctx, interval, func() { holder.CheckListsOnce() })
		return nil
	}))
}
