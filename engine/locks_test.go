package engine

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
)

// lockPolicy has lock rules on every subject kind: by user on the auth
// class (the default), by device on the otp class only, and an allow list
// of accounts.
const lockPolicy = `version: 1
routes:
  - {match: "POST /auth/login", class: auth}
  - {match: "POST /otp",        class: otp}
  - {match: "* *",              class: write}
limits:
  - {name: login-account, by: [account], rate: 5/min, if: {class: auth}}
  - {name: otp-device,    by: [device],  rate: 5/min, if: {class: otp}}
lists:
  staff: {file: staff.txt, kind: account}
allow: [staff]
risk:
  velocity:
    - {name: user-failures,   event: login_failed, by: user,   threshold: 5, window: 1m, action: lockout, duration: 5m}
    - {name: device-otp,      event: otp_sent,     by: device, threshold: 5, window: 1m, action: step_up, duration: 5m,
       classes: [otp]}
    - {name: ip-failures,     event: login_failed, by: ip,     threshold: 5, window: 1m, action: lockout, duration: 5m}
    - {name: account-failures, event: login_failed, by: account, threshold: 5, window: 1m, action: lockout, duration: 5m}
`

// lockStores are the stores every lock test runs on: the memory store,
// Redis, and a Redis Cluster (locks of other slots than the buckets').
func lockStores(t *testing.T, now func() time.Time) map[string]bucket.Store {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	rs := bucket.NewRedisStore(rdb, bucket.RedisOptions{Prefix: prefix, Timeout: 5 * time.Second})
	t.Cleanup(func() { rs.Close() })
	cl := testenv.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { cc.Close() })
	cs := bucket.NewRedisStore(cc, bucket.RedisOptions{Timeout: 5 * time.Second, Cluster: true})
	t.Cleanup(func() { cs.Close() })
	return map[string]bucket.Store{
		"memory":  bucket.NewMemoryStore(bucket.MemoryOptions{Now: now}),
		"redis":   rs,
		"cluster": cs,
	}
}

func lockEngine(t *testing.T, store bucket.Store, l1 *L1) *Engine {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "staff.txt", "boss\n")
	p, err := policy.Load(writeFile(t, dir, "p.yaml", lockPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Store: store, Policy: func() *policy.Policy { return p }, L1: l1})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestLocksOnEverySubject: a lock of each subject kind answers on the
// classes of the rule that set it, with its scope (7.1), on every store,
// with and without the L1 cache; a lock of a rule of other classes does
// not answer there; an allow-listed account is locked like any other.
func TestLocksOnEverySubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	for name, store := range lockStores(t, time.Now) {
		for _, l1 := range []bool{false, true} {
			var cache *L1
			if l1 {
				cache = NewL1(L1Options{TTL: time.Minute})
			}
			e := lockEngine(t, store, cache)
			admin := bucket.Admin(store)
			if cache != nil {
				admin = cache.Wrap(store)
			}
			set := func(kind, id, lock, rule string) {
				t.Helper()
				if err := admin.SetLock(ctx, bucket.Subject{Kind: kind, ID: id}, bucket.Lock{Kind: lock, Rule: rule, Until: until}); err != nil {
					t.Fatal(err)
				}
			}
			set("user", "u-"+name, "lockout", "user-failures")
			set("ip", "192.0.2.9", "lockout", "ip-failures")
			set("device", "d-"+name, "step_up", "device-otp")
			set("account", "boss", "lockout", "account-failures")
			for _, tc := range []struct {
				name  string
				in    Input
				want  Outcome
				scope string
			}{
				{"user on auth", Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", UserID: "u-" + name, Account: "a"}, Locked, "user"},
				{"user elsewhere", Input{Endpoint: "POST /x", IP: "192.0.2.1", UserID: "u-" + name}, Allowed, ""},
				{"ip on auth", Input{Endpoint: "POST /auth/login", IP: "192.0.2.9", Account: "b"}, Locked, "ip"},
				{"device on otp", Input{Endpoint: "POST /otp", IP: "192.0.2.1", DeviceID: "d-" + name}, StepUp, "device"},
				{"device on auth", Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", DeviceID: "d-" + name, Account: "c"}, Allowed, ""},
				{"allow-listed account", Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", Account: "boss"}, Locked, "account"},
			} {
				for round := range 2 { // the second answer may come from the L1 cache
					in := tc.in
					in.Cost = 1
					var d Decision
					if err := e.Decide(ctx, &in, &d); err != nil {
						t.Fatal(err)
					}
					if d.Outcome != tc.want || d.LockScope != tc.scope {
						t.Errorf("%s l1=%v %s round %d: outcome %v scope %q; want %v %q", name, l1, tc.name, round, d.Outcome, d.LockScope, tc.want, tc.scope)
					}
				}
			}
			if _, err := admin.ClearLock(ctx, bucket.Subject{Kind: "account", ID: "boss"}); err != nil {
				t.Fatal(err)
			}
			in := Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", Account: "boss", Cost: 1}
			var d Decision
			if err := e.Decide(ctx, &in, &d); err != nil || d.Outcome != AllowedList {
				t.Errorf("%s l1=%v: allow-listed account after the lift: %v %v; want allowed_list", name, l1, d.Outcome, err)
			}
			_, _ = admin.ClearLock(ctx, bucket.Subject{Kind: "user", ID: "u-" + name})
			_, _ = admin.ClearLock(ctx, bucket.Subject{Kind: "device", ID: "d-" + name})
			_, _ = admin.ClearLock(ctx, bucket.Subject{Kind: "ip", ID: "192.0.2.9"})
		}
	}
}

// TestLockPartsByClass: the auth class checks account and ip always and
// the subjects of the lock rules on it; other classes only their rules'.
func TestLockPartsByClass(t *testing.T) {
	t.Parallel()
	e := lockEngine(t, bucket.NewMemoryStore(bucket.MemoryOptions{}), nil)
	p := e.Policy()
	for class, want := range map[string]string{"auth": "account ip user", "otp": "device", "write": "", "default": ""} {
		got := ""
		for _, part := range p.LockParts(p.ClassIndex(class)) {
			if got != "" {
				got += " "
			}
			got += part.String()
		}
		if got != want {
			t.Errorf("LockParts(%s) = %q, want %q", class, got, want)
		}
	}
}

// ipLockPolicy locks by ip on the auth class; %s is identity.ipv6_prefix.
const ipLockPolicy = `version: 1
identity:
  ipv6_prefix: %s
routes:
  - {match: "POST /auth/login", class: auth}
limits:
  - {name: login-ip, by: [ip], rate: 5/min, if: {class: auth}}
risk:
  velocity:
    - {name: ip-spray, event: login_failed, by: ip, threshold: 50, window: 10m, action: lockout, duration: 15m}
`

// TestIPv6LocksByPrefix (7.1): the ip lock of an IPv6 client is checked
// under its identity.ipv6_prefix id, where riskd writes it, so a lock of
// a /64 refuses every address of it and none of the next; a whole
// address's lock (the previous release's) still answers for that address
// alone; an IPv4 client, and every client with ipv6_prefix 128, checks
// one ip lock key, its address's.
func TestIPv6LocksByPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		prefix string
		want   map[string]Outcome // by client address
		keys   map[string]string  // the ip lock keys' ids checked, by client address
	}{
		{"64", map[string]Outcome{
			"2001:db8:1:2::abc": Locked, "2001:db8:1:2:ffff::1": Locked, "2001:db8:1:3::1": Allowed,
			"2001:db8:9::7": Locked, "2001:db8:9::8": Allowed, "192.0.2.9": Locked, "192.0.2.10": Allowed,
		}, map[string]string{
			"2001:db8:1:3::1": "2001:db8:1:3::/64 2001:db8:1:3::1", "192.0.2.10": "192.0.2.10",
		}},
		{"128", map[string]Outcome{
			"2001:db8:1:2::abc": Allowed, "2001:db8:9::7": Locked, "2001:db8:9::8": Allowed, "192.0.2.9": Locked,
		}, map[string]string{
			"2001:db8:1:3::1": "2001:db8:1:3::1", "192.0.2.10": "192.0.2.10",
		}},
	} {
		rs := &recordingStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
		e := newEngine(t, fmt.Sprintf(ipLockPolicy, tc.prefix), rs)
		for _, id := range []string{"2001:db8:1:2::/64", "2001:db8:9::7", "192.0.2.9"} {
			if err := rs.SetLock(ctx, bucket.Subject{Kind: "ip", ID: id}, bucket.Lock{Kind: "lockout", Rule: "ip-spray", Until: until}); err != nil {
				t.Fatal(err)
			}
		}
		decide := func(ip string) Decision {
			in := Input{Endpoint: "POST /auth/login", IP: ip, Cost: 1}
			var d Decision
			if err := e.Decide(ctx, &in, &d); err != nil {
				t.Fatal(err)
			}
			return d
		}
		for ip, want := range tc.want {
			if d := decide(ip); d.Outcome != want || want == Locked && d.LockScope != "ip" {
				t.Errorf("ipv6_prefix %s, %s: %v scope %q; want %v", tc.prefix, ip, d.Outcome, d.LockScope, want)
			}
		}
		for ip, want := range tc.keys {
			decide(ip)
			var ids []string
			for _, k := range rs.req.Locks {
				for _, id := range []string{ip, IPKey(e.o.Policy(), ip, netip.Addr{})} {
					if k == bucket.LockKey(rs.Prefix(), "ip", id) && !slices.Contains(ids, id) {
						ids = append(ids, id)
					}
				}
			}
			if got := strings.Join(ids, " "); got != want || len(rs.req.Locks) != len(ids) {
				t.Errorf("ipv6_prefix %s, %s: ip lock ids %q of %d lock keys; want %q alone", tc.prefix, ip, got, len(rs.req.Locks), want)
			}
		}
	}
}
