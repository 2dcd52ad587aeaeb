package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// component is one part of a daemon (a store, a listener, a watcher, the
// risk daemon). Its constructor validates its config and acquires what it
// holds (a socket, a connection); Run serves until ctx ends or the part
// fails, and releases what the part holds before it returns, whichever
// way it returns. A component that has nothing left to do may return nil
// early (a watcher of a built-in policy).
type component interface {
	Run(ctx context.Context) error
}

// componentFunc adapts a function to a component.
type componentFunc func(ctx context.Context) error

// Run implements component.
func (f componentFunc) Run(ctx context.Context) error { return f(ctx) }

// group runs a daemon's components: it starts them in the order they were
// added; the first one that fails cancels the rest and is the group's
// error; on shutdown (ctx ends, or a failure) it stops them one at a time
// in reverse order of start, each after the ones started later have
// returned, so a listener drains before the store it uses closes. Add all
// components before Start; a group is run once.
type group struct {
	log   *slog.Logger
	names []string
	comps []component

	stops []context.CancelFunc
	dones []chan error
	fail  chan struct{} // closed by the first component that fails
	once  sync.Once
	cause error // the first failure; set before fail is closed
}

// add appends c, named name in errors and logs, to the group.
func (g *group) add(name string, c component) {
	g.names = append(g.names, name)
	g.comps = append(g.comps, c)
}

// abort releases every component added, none of which was started: each
// runs with an ended context, last added first. A constructor that fails
// after others succeeded calls it.
func (g *group) abort() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := len(g.comps) - 1; i >= 0; i-- {
		if err := g.comps[i].Run(ctx); err != nil {
			g.log.Warn("release after a failed start", "component", g.names[i], "err", err.Error())
		}
	}
}

// start starts every component, in order. Each runs on a context that
// carries ctx's values but ends only when the group stops it.
func (g *group) start(ctx context.Context) {
	g.fail = make(chan struct{})
	base := context.WithoutCancel(ctx)
	for i, c := range g.comps {
		cctx, stop := context.WithCancel(base)
		done := make(chan error, 1)
		g.stops, g.dones = append(g.stops, stop), append(g.dones, done)
		go func() {
			err := c.Run(cctx)
			if err != nil && cctx.Err() == nil {
				g.failed(fmt.Errorf("service: %s: %w", g.names[i], err))
			}
			done <- err
		}()
	}
}

// failed records the first failure and wakes wait.
func (g *group) failed(err error) {
	g.once.Do(func() {
		g.cause = err
		close(g.fail)
	})
}

// finish waits for the group in the background (wait), then records why
// it stopped in run.Err, logs "stopped" and closes run.Done.
func (g *group) finish(ctx context.Context, run *Running) {
	go func() {
		run.Err = g.wait(ctx)
		g.log.Info("stopped")
		close(run.Done)
	}()
}

// wait blocks until ctx ends or a component fails, then stops every
// component in reverse order of start. It returns the first failure, or
// else what the components returned while stopping (a drain that timed
// out), or nil.
func (g *group) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-g.fail:
		g.log.Error("stopping: a component failed", "err", g.cause.Error())
	}
	var errs []error
	for i := len(g.comps) - 1; i >= 0; i-- {
		g.stops[i]()
		if err := <-g.dones[i]; err != nil {
			errs = append(errs, fmt.Errorf("service: stop %s: %w", g.names[i], err))
		}
	}
	select {
	case <-g.fail:
		return g.cause
	default:
		return errors.Join(errs...)
	}
}

// parallel is a component made of parts that run side by side and stop
// together: when its context ends, or a part fails, every part is told to
// stop at once, and Run returns once all have returned. The limiter's
// listeners are one, so their drains overlap under one --shutdown-timeout
// instead of following each other, while the group still stops them as
// one component: after readiness turned to draining, before the event
// publisher and the store close. Add every part before Run; the zero
// value has none.
type parallel struct {
	names []string
	parts []component
}

var _ component = (*parallel)(nil)

// add appends c, named name in errors, to the parts.
func (p *parallel) add(name string, c component) {
	p.names = append(p.names, name)
	p.parts = append(p.parts, c)
}

// partResult is what part i of a parallel returned.
type partResult struct {
	i   int
	err error
}

// Run runs every part on one context derived from ctx, until ctx ends or
// a part fails (returns an error before being told to stop; one that
// returns nil early leaves the others running), then stops them all and
// waits for them. It returns the failure, or else what the parts
// returned while stopping, joined; each error names its part.
func (p *parallel) Run(ctx context.Context) error {
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	results := make(chan partResult, len(p.parts))
	for i, c := range p.parts {
		go func() { results <- partResult{i, c.Run(pctx)} }()
	}
	var failure error
	var errs []error
	for range p.parts {
		r := <-results
		if r.err == nil {
			continue
		}
		err := fmt.Errorf("%s: %w", p.names[r.i], r.err)
		if failure == nil && pctx.Err() == nil {
			failure = err
			stop()
			continue
		}
		errs = append(errs, err)
	}
	if failure != nil {
		return failure
	}
	return errors.Join(errs...)
}
