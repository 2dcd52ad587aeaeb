package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// Leases of concurrency limits.
//
// A decision that takes a slot of one or more concurrency limits adds a
// random lease to each limit's set in the store; its lease id, which the
// check API answers and POST /v1/release takes back, is the lease and the
// keys of those sets (without the store's prefix, base64url), joined by
// dots: any limiter on the store can release it, with no state of its own.
// A forged id frees nothing: the lease is 96 random bits.
//
// A decision whose store call failed after it may have reached the store
// (its answer timed out, its caller went away) has no lease id to hand
// out, yet its script may still run and take the slots: the engine gives
// such a lease back itself (giveBack), or the slots would stay taken, by
// no one, for their lease_ttl.

// ErrBadLeaseID reports a lease id that is not one a decision answered.
var ErrBadLeaseID = errors.New("engine: malformed lease id")

// newLease returns a random lease (bucket.LeaseLen hex digits).
func newLease() string {
	var b [bucket.LeaseLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// leaseID builds d's lease id from the concurrency limits that took a
// slot ("" when none did).
func (e *Engine) leaseID(d *Decision) string {
	req := &d.breq
	if req.Lease == "" || d.Outcome != Allowed || len(d.bres.Limits) != len(req.Limits) {
		return ""
	}
	var sb strings.Builder
	for i := range req.Limits {
		l := &req.Limits[i]
		if l.Kind != bucket.KindConcurrency || !d.bres.Limits[i].Allowed {
			continue
		}
		if sb.Len() == 0 {
			sb.WriteString(req.Lease)
		}
		sb.WriteByte('.')
		sb.WriteString(base64.RawURLEncoding.EncodeToString([]byte(strings.TrimPrefix(l.Key, e.o.Prefix))))
	}
	return sb.String()
}

// Release frees the slots of the lease id a decision answered
// (Decision.LeaseID). It reports whether the lease held a slot in force:
// false for an unknown, already released or expired lease, which frees
// nothing. A malformed id is ErrBadLeaseID; a store failure wraps
// bucket.ErrUnavailable.
func (e *Engine) Release(ctx context.Context, id string) (bool, error) {
	lease, keys, err := e.parseLeaseID(id)
	if err != nil {
		return false, err
	}
	ok, err := e.o.Store.Release(ctx, lease, keys)
	if err != nil {
		return false, fmt.Errorf("engine: release: %w", err)
	}
	if e.o.Metrics != nil {
		e.o.Metrics.release(ok)
	}
	return ok, nil
}

// Bounds on giving back the leases of failed decisions (giveBack).
const (
	// maxGiveBacks bounds the give-backs under way; past it a failed
	// decision's lease is left to expire after its lease_ttl.
	maxGiveBacks = 1024
	// giveBackFor bounds how long one give-back tries (and the lease's
	// lease_ttl, after which there is nothing to give back).
	giveBackFor = time.Minute
	// giveBackWait is the first wait between tries; it doubles up to
	// giveBackMaxWait.
	giveBackWait    = 50 * time.Millisecond
	giveBackMaxWait = 2 * time.Second
)

// giveBack frees, in the background, the slots req's concurrency limits
// may have taken for a decision whose store call failed with err after it
// reached the store (bucket.ErrUnanswered: a timeout, a caller gone): the
// script may have run, or still run, and no one has its lease id. A call
// that never left (its caller gone while it waited for a lane: HTTP/2
// rapid resets) costs nothing. It releases the lease
// until the store answers, and once more, a beat later, when that answer
// found nothing: the decision was sent before the release (or was being
// sent), but on another connection, so the first answer may come from a
// Redis that had not yet run it.
// Releasing a lease that was never added frees nothing.
func (e *Engine) giveBack(req *bucket.Request, err error) {
	if req.Lease == "" || req.Cost <= 0 || !errors.Is(err, bucket.ErrUnanswered) {
		return
	}
	var keys []string
	ttl := time.Duration(0)
	for i := range req.Limits {
		if l := &req.Limits[i]; l.Kind == bucket.KindConcurrency {
			keys = append(keys, strings.Clone(l.Key)) // the request's keys may be lent
			ttl = max(ttl, l.LeaseTTL)
		}
	}
	if len(keys) == 0 {
		return
	}
	select {
	case e.giveBacks <- struct{}{}:
	default:
		return // too many under way: this one expires after its lease_ttl
	}
	lease := req.Lease
	go func() {
		defer func() { <-e.giveBacks }()
		ctx, cancel := context.WithTimeout(context.Background(), min(ttl, giveBackFor))
		defer cancel()
		answered := false
		for wait := giveBackWait; ; wait = min(2*wait, giveBackMaxWait) {
			freed, err := e.o.Store.Release(ctx, lease, keys)
			if err == nil {
				if freed && e.o.Metrics != nil {
					e.o.Metrics.Releases.WithLabelValues(ReleaseGivenBack).Inc()
				}
				if freed || answered {
					return
				}
				// once more, a beat later: the decision may still have
				// been on its way (a lane sends what it took just before)
				answered, wait = true, giveBackWait
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// parseLeaseID splits a lease id into its lease and its sets' keys.
func (e *Engine) parseLeaseID(id string) (string, []string, error) {
	parts := strings.Split(id, ".")
	if len(parts) < 2 || len(parts) > bucket.MaxLimits+1 || len(parts[0]) != bucket.LeaseLen {
		return "", nil, ErrBadLeaseID
	}
	if _, err := hex.DecodeString(parts[0]); err != nil || strings.ToLower(parts[0]) != parts[0] {
		return "", nil, ErrBadLeaseID
	}
	keys := make([]string, 0, len(parts)-1)
	for _, p := range parts[1:] {
		k, err := base64.RawURLEncoding.DecodeString(p)
		// the decoder skips CR and LF: an id is refused unless it is spelt as issued
		if err != nil || len(k) == 0 || !strings.Contains(string(k), ":b:") || base64.RawURLEncoding.EncodeToString(k) != p {
			return "", nil, ErrBadLeaseID
		}
		keys = append(keys, e.o.Prefix+string(k))
	}
	return parts[0], keys, nil
}

// windowOf is the IETF `w` of limit l at now: a bucket's period, the
// length of a quota's current calendar period, a concurrency limit's
// lease TTL.
func windowOf(l *policy.Limit, now time.Time) time.Duration {
	switch l.Kind {
	case policy.KindQuota:
		s, e := bucket.Calendar(l.Calendar).Bounds(now)
		return e.Sub(s)
	case policy.KindConcurrency:
		return l.LeaseTTL
	}
	return l.Period
}
