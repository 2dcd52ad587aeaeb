package service

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// recorder is a component that logs its start and stop, and fails on
// demand.
type recorder struct {
	name string
	log  *[]string
	mu   *sync.Mutex
	fail chan error
}

func (r recorder) Run(ctx context.Context) error {
	r.mu.Lock()
	*r.log = append(*r.log, "run "+r.name)
	r.mu.Unlock()
	var err error
	select {
	case <-ctx.Done():
	case err = <-r.fail:
	}
	r.mu.Lock()
	*r.log = append(*r.log, "stop "+r.name)
	r.mu.Unlock()
	return err
}

// TestGroup: components stop in reverse order of start when ctx ends;
// the first failure stops the others and is the group's error; abort
// releases components that never started, last first.
func TestGroup(t *testing.T) {
	t.Parallel()
	build := func() (*group, []recorder, *[]string) {
		var log []string
		mu := &sync.Mutex{}
		g := &group{log: slog.New(slog.DiscardHandler)}
		var rs []recorder
		for _, n := range []string{"a", "b", "c"} {
			r := recorder{name: n, log: &log, mu: mu, fail: make(chan error, 1)}
			rs = append(rs, r)
			g.add(n, r)
		}
		return g, rs, &log
	}
	stops := func(log []string) string {
		var out []string
		for _, l := range log {
			if strings.HasPrefix(l, "stop ") {
				out = append(out, strings.TrimPrefix(l, "stop "))
			}
		}
		return strings.Join(out, ",")
	}

	g, _, log := build()
	ctx, cancel := context.WithCancel(context.Background())
	g.start(ctx)
	cancel()
	if err := g.wait(ctx); err != nil || stops(*log) != "c,b,a" {
		t.Fatalf("on ctx end: err %v, stopped %s; want nil and c,b,a", err, stops(*log))
	}

	g, rs, log := build()
	g.start(context.Background())
	rs[1].fail <- errors.New("boom")
	err := g.wait(context.Background())
	if err == nil || err.Error() != "service: b: boom" || stops(*log) != "b,c,a" {
		t.Fatalf("on failure: err %v, stopped %s; want service: b: boom and b,c,a", err, stops(*log))
	}

	g, _, log = build()
	g.abort()
	if stops(*log) != "c,b,a" {
		t.Fatalf("abort stopped %s, want c,b,a", stops(*log))
	}
}

// TestParallel: a parallel's parts are told to stop together (each part
// here returns only once the other was told to stop, which one after the
// other would never do); a part that returns nil early leaves the others
// running; a failing part stops the others and is the error, named.
func TestParallel(t *testing.T) {
	t.Parallel()
	// waitsFor returns once its ctx and other have both ended.
	waitsFor := func(other <-chan struct{}, told chan<- struct{}) component {
		return componentFunc(func(ctx context.Context) error {
			<-ctx.Done()
			close(told)
			<-other
			return nil
		})
	}
	aTold, bTold := make(chan struct{}), make(chan struct{})
	p := &parallel{}
	p.add("a", waitsFor(bTold, aTold))
	p.add("b", waitsFor(aTold, bTold))
	p.add("early", componentFunc(func(context.Context) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("on ctx end: %v", err)
	}

	var log []string
	r := recorder{name: "r", log: &log, mu: &sync.Mutex{}, fail: make(chan error, 1)}
	p = &parallel{}
	p.add("early", componentFunc(func(context.Context) error { return nil }))
	p.add("r", r)
	p.add("failing", componentFunc(func(context.Context) error { return errors.New("boom") }))
	if err := p.Run(context.Background()); err == nil || err.Error() != "failing: boom" || strings.Join(log, ",") != "run r,stop r" {
		t.Fatalf("on failure: err %v, log %v; want failing: boom and r stopped", err, log)
	}
}
