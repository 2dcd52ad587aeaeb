package service

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
)

// watchConfig configures the policy watcher: a changed policy file or
// allow/deny list file is reloaded (policy.Holder.Watch).
type watchConfig struct {
	// Holder holds the policy (required); Path is its file ("": the
	// built-in policy, which never reloads and names no lists).
	Holder *policy.Holder
	Path   string
	// Interval is how often it looks (<= 0: policy.DefaultWatchInterval).
	Interval time.Duration
}

// Validate checks that a holder is given.
func (c watchConfig) Validate() error {
	if c.Holder == nil {
		return errors.New("service: policy watcher: a holder is required")
	}
	return nil
}

// addWatchers adds the policy watcher of c to g (none for the built-in
// policy). It checks the policy file and then the list files at every
// interval, logging through the holder's logger.
func addWatchers(g *group, c watchConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Path == "" {
		return nil
	}
	g.add("policy watcher", componentFunc(func(ctx context.Context) error {
		c.Holder.Watch(ctx, c.Interval)
		return nil
	}))
	return nil
}
