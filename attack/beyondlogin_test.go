package attack

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
)

// TestAttackStalledStoreLeaksConcurrencySlots: a tenant may run 2 exports
// at once (lease_ttl 1h). Redis stalls for a moment while exports are
// being decided: each check times out and is answered 200 degraded (the
// limit fails open) without a lease_id, but a decision already sent still
// runs once Redis goes on and takes a slot for its hour. No one holds its
// lease id, so no one can release it: after a stall of a fraction of a
// second, 1 of the tenant's 2 slots stayed taken by no export (it got 1
// of its next 3 exports, not 2) for the hour, and a client that hangs up
// while its check is in flight (proxy mode, a backend's HTTP timeout)
// leaks its slot the same way. Now a decision that fails after it may
// have reached the store gives its lease back: 0 slots held once Redis
// answers, 2 of the next 3 exports admitted.
func TestAttackStalledStoreLeaksConcurrencySlots(t *testing.T) {
	t.Parallel()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nlimits:\n  - {name: exports, by: [attr:tenant], concurrency: 2, lease_ttl: 1h}\nfailure_mode: {default: open}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := testenv.StartRedis(t)
	tg := start(t, func(c *service.Config) {
		c.ConfigPath, c.NoForwardAuth = pol, true
		c.RedisURL, c.StoreTimeout = "redis://"+rs.Addr+"/0", 100*time.Millisecond
	})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { rdb.Close() })
	set := tg.prefix + "{attr:tenant:acme}:b:exports"
	held := func() int64 {
		t.Helper()
		now, err := rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := rdb.ZCount(t.Context(), set, "("+strconv.FormatInt(now.UnixMicro(), 10), "+inf").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const export = `{"endpoint":"GET /export","ip":"198.51.100.7","attributes":{"tenant":"acme"}}`
	check := func() (int, http.Header, string) {
		t.Helper()
		return doH(t, "POST", tg.api+"/v1/check", export, bearer(apiToken))
	}
	// warm the limiter's connections to Redis: an export taken and given back
	code, _, body := check()
	id := leaseIDOf(body)
	if code != 200 || id == "" {
		t.Fatalf("warm-up export: %d %s", code, body)
	}
	if code, body := do(t, "POST", tg.api+"/v1/release", `{"lease_id":"`+id+`"}`, bearer(apiToken)); code != 200 {
		t.Fatalf("warm-up release: %d %s", code, body)
	}

	rs.Pause(t)
	for range 2 {
		code, h, body := check()
		if code != 200 || h.Get("X-RateLimit-Degraded") != "1" || leaseIDOf(body) != "" {
			t.Fatalf("export while Redis stalls: %d degraded %q %s, want 200 degraded without a lease", code, h.Get("X-RateLimit-Degraded"), body)
		}
	}
	rs.Resume(t)

	// the stalled decisions ran once Redis went on; their slots must come
	// back, though no one holds their leases
	eventually(t, 10*time.Second, func() string {
		if n := held(); n != 0 {
			return strconv.FormatInt(n, 10) + " of 2 slots held by exports no one runs"
		}
		return ""
	})
	admitted := 0
	for range 3 {
		switch code, _, body := check(); {
		case code == 200 && leaseIDOf(body) != "":
			admitted++
		case code == 429 && strings.Contains(body, `"kind":"concurrency"`):
		default:
			t.Fatalf("export after the stall: %d %s", code, body)
		}
	}
	if admitted != 2 {
		t.Fatalf("after a stall, the tenant got %d of its 2 exports", admitted)
	}
}

// leaseIDOf returns the lease_id of a check's answer ("" when none).
func leaseIDOf(body string) string {
	var a struct {
		LeaseID string `json:"lease_id"`
	}
	_ = json.Unmarshal([]byte(body), &a)
	return a.LeaseID
}
