package bucket

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reading every trust set back (7.1). riskd keeps a record of the
// enrolments in force to write back into a Redis that restarted empty,
// but a riskd that starts can rebuild it from the events stream only as
// far back as the stream keeps reports (48 h), where trust lasts 30 days.
// While Redis is alive it holds every enrolment: ScanTrust reads them.

// TrustScanner iterates the accounts' trust sets; both stores implement
// it.
type TrustScanner interface {
	// ScanTrust calls fn with each (account, device, end) in force of
	// every account's trust set, one call at a time, and stops at fn's
	// first error, returning it. An entry ending meanwhile may be passed
	// or not; one enrolled meanwhile may be missed.
	ScanTrust(ctx context.Context, fn func(account, device string, until time.Time) error) error
}

var (
	_ TrustScanner = (*RedisStore)(nil)
	_ TrustScanner = (*MemoryStore)(nil)
)

// ScanCount is the COUNT of each SCAN of ScanTrust: the keys Redis looks
// at per call, so one call never blocks Redis for long, and the most trust
// sets read in one round trip.
const ScanCount = 1000

// trustNode is one Redis server of a store's client: the client itself,
// or a Cluster's master (a Ring's shard), each scanned in turn.
type trustNode interface {
	redis.Scripter
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	Pipeline() redis.Pipeliner
}

// ScanTrust implements TrustScanner: a SCAN MATCH of the accounts' trust
// keys on every node (each master of a Cluster), ScanCount keys a call,
// and the members in force of each key found read by trustListScript (by
// Redis TIME), one pipelined round trip per SCAN call. Memory is bounded
// by ScanCount trust sets.
func (s *RedisStore) ScanTrust(ctx context.Context, fn func(account, device string, until time.Time) error) error {
	var mu sync.Mutex // fn is called one at a time; masters are scanned concurrently
	each := func(ctx context.Context, n trustNode) error {
		return s.scanNode(ctx, n, func(account, device string, until time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(account, device, until)
		})
	}
	switch c := s.c.(type) {
	case interface {
		ForEachMaster(context.Context, func(context.Context, *redis.Client) error) error
	}:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return each(ctx, n) })
	case interface {
		ForEachShard(context.Context, func(context.Context, *redis.Client) error) error
	}:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return each(ctx, n) })
	case trustNode:
		return each(ctx, c)
	}
	return fmt.Errorf("%w: scan trust: client %T cannot scan", ErrUnavailable, s.c)
}

// scanNode scans one node's trust keys for ScanTrust.
func (s *RedisStore) scanNode(ctx context.Context, n trustNode, fn func(account, device string, until time.Time) error) error {
	match := GlobEscape(s.prefix) + "{account:*}:t"
	if err := trustListScript.Load(ctx, n).Err(); err != nil {
		return fmt.Errorf("%w: scan trust: load script: %w", ErrUnavailable, err)
	}
	var cursor uint64
	for {
		keys, next, err := n.Scan(ctx, cursor, match, ScanCount).Result()
		if err != nil {
			return fmt.Errorf("%w: scan trust %q at cursor %d: %w", ErrUnavailable, match, cursor, err)
		}
		if err := s.readTrustSets(ctx, n, keys, fn); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// readTrustSets reads the members in force of the trust keys among keys
// in one pipeline and passes them to fn.
func (s *RedisStore) readTrustSets(ctx context.Context, n trustNode, keys []string, fn func(account, device string, until time.Time) error) error {
	var accounts, trustKeys []string
	var cmds []*redis.Cmd
	pipe := n.Pipeline()
	for _, k := range keys {
		if a, ok := trustKeyAccount(s.prefix, k); ok {
			accounts, trustKeys = append(accounts, a), append(trustKeys, k)
			cmds = append(cmds, trustListScript.EvalSha(ctx, pipe, []string{k}))
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	for i, c := range cmds {
		v, err := c.StringSlice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// the script was flushed since it was loaded: Run loads it again
			v, err = trustListScript.Run(ctx, n, trustKeys[i:i+1]).StringSlice()
		}
		if err != nil {
			return fmt.Errorf("%w: scan trust %s: %w", ErrUnavailable, trustKeys[i], err)
		}
		if err := passTrusted(accounts[i], v, fn); err != nil {
			return err
		}
	}
	return nil
}

// passTrusted passes trustListScript's reply v (device, end in µs, ...)
// of account's set to fn.
func passTrusted(account string, v []string, fn func(account, device string, until time.Time) error) error {
	for i := 0; i+1 < len(v); i += 2 {
		us, err := strconv.ParseInt(v[i+1], 10, 64) // trustListScript writes %d
		if err != nil {
			return fmt.Errorf("%w: scan trust of account %q: end %q: %w", ErrUnavailable, account, v[i+1], err)
		}
		if err := fn(account, v[i], time.UnixMicro(us)); err != nil {
			return err
		}
	}
	return nil
}

// trustKeyAccount returns the account whose trust key under prefix key
// is; false for any other key (a glob's `*` also matches a rule lock key
// whose rule ends in "}:t", or a longer prefix's keys).
func trustKeyAccount(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{account:")
	if !ok {
		return "", false
	}
	esc, ok := strings.CutSuffix(rest, "}:t")
	if !ok || strings.ContainsAny(esc, "{}:") { // escaped in ids (EscapeID)
		return "", false
	}
	id, err := unescapeID(esc)
	return id, err == nil
}

// GlobEscape escapes the glob characters of s (`*`, `?`, `[`, `]`, `\`)
// for a Redis MATCH pattern that matches s literally.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ScanTrust implements TrustScanner: a copy of the accounts' trust sets
// in force (bounded by MaxSubjects) taken under the store's lock, then
// passed to fn without it, so fn may call the store.
func (s *MemoryStore) ScanTrust(ctx context.Context, fn func(account, device string, until time.Time) error) error {
	type entry struct {
		account, device string
		until           time.Time
	}
	now := s.now()
	var all []entry
	s.mu.RLock()
	for key, set := range s.trusts {
		id, ok := trustKeyAccount(s.prefix, key)
		if !ok {
			continue
		}
		for d, until := range set {
			if until.After(now) {
				all = append(all, entry{id, d, until})
			}
		}
	}
	s.mu.RUnlock()
	for _, e := range all {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bucket: scan trust: %w", err)
		}
		if err := fn(e.account, e.device, e.until); err != nil {
			return err
		}
	}
	return nil
}
