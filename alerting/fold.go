package alerting

import (
	"context"
	"time"
)

// foldKey is what repeats share: an alert's kind, subject and id.
type foldKey struct{ kind, subject, id string }

// group is the alerts of one key folded into one delivery. Its window
// is [start, start+fold) in the alerts' own time (ts).
type group struct {
	start  time.Time
	items  []item
	flush  chan struct{} // closed to deliver before the window's end
	closed bool          // taken for delivery: joins no more (guarded by lane.mu)
}

// fold adds it to the open group of its key when its ts falls in that
// group's window; otherwise it delivers the open group at once and opens
// a new one, delivered when fold has passed (in this process's time:
// the repeats that arrive meanwhile join it).
func (l *lane) fold(ctx context.Context, it item, fold time.Duration) {
	a := it.alert
	k := foldKey{a.Kind, a.Subject, a.SubjectID}
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.groups[k]; g != nil && !g.closed {
		if within(a.TS, g.start, fold) {
			g.items = append(g.items, it)
			return
		}
		g.closed = true
		close(g.flush)
	}
	g := &group{start: a.TS, items: []item{it}, flush: make(chan struct{})}
	l.groups[k] = g
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTimer(fold)
		select {
		case <-t.C:
		case <-g.flush:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
		}
		l.mu.Lock()
		g.closed = true
		if l.groups[k] == g {
			delete(l.groups, k)
		}
		items := g.items
		l.mu.Unlock()
		l.deliver(ctx, items)
	}()
}

// within reports whether ts is less than fold away from start, either way.
func within(ts, start time.Time, fold time.Duration) bool {
	d := ts.Sub(start)
	return d > -fold && d < fold
}
