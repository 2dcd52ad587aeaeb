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
	closed bool          // taken for delivery: joins no more (guarded by Deliverer.mu)
}

// fold adds it to the open group of its key when its ts falls in that
// group's window; otherwise it delivers the open group at once and opens
// a new one, delivered when fold has passed (in this process's time:
// the repeats that arrive meanwhile join it).
func (d *Deliverer) fold(ctx context.Context, it item, fold time.Duration) {
	a := it.alert
	k := foldKey{a.Kind, a.Subject, a.SubjectID}
	d.mu.Lock()
	defer d.mu.Unlock()
	if g := d.groups[k]; g != nil && !g.closed {
		if within(a.TS, g.start, fold) {
			g.items = append(g.items, it)
			return
		}
		g.closed = true
		close(g.flush)
	}
	g := &group{start: a.TS, items: []item{it}, flush: make(chan struct{})}
	d.groups[k] = g
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTimer(fold)
		select {
		case <-t.C:
		case <-g.flush:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
		}
		d.mu.Lock()
		g.closed = true
		if d.groups[k] == g {
			delete(d.groups, k)
		}
		items := g.items
		d.mu.Unlock()
		d.deliver(ctx, items)
	}()
}

// within reports whether ts is less than fold away from start, either way.
func within(ts, start time.Time, fold time.Duration) bool {
	d := ts.Sub(start)
	return d > -fold && d < fold
}
