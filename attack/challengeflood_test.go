package attack

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// redisKeys counts the keys under tg's prefix in its Redis.
func (tg *target) redisKeys(t *testing.T, pattern string) int {
	t.Helper()
	n := 0
	iter := tg.rdb.Scan(context.Background(), 0, tg.prefix+pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// Attack: POST /v1/attest/challenge is public and unauthenticated, and
// each challenge was a key of its own in the shared Redis for five
// minutes (120 to 300 bytes). From rotating addresses (each allowed 60
// a minute), 10,000 challenges a second hold 3 million keys, up to a
// gigabyte, in the Redis that holds every bucket: once it refuses
// writes, auth routes fail closed and nobody logs in. Garbage
// attestations sent with the challenges cost a key each as well.
// Defence (7.5): a challenge is signed, not stored (an HMAC of the
// device id, a nonce and its expiry, by a key the replicas share through
// Redis), and is marked used only by an attestation that verified.
func TestAttackChallengeFloodFillsRedis(t *testing.T) {
	t.Parallel()
	tg := start(t, withApple(t, attestationtest.NewCA(t, time.Now())))
	for i := range 300 {
		ip := fmt.Sprintf("198.18.%d.%d", 40+i/200, i%200+1)
		code, a := attestPost(t, tg, "challenge", ip, fmt.Sprintf(`{"device_id":"flood-%d"}`, i))
		if code != http.StatusOK || a.Challenge == "" {
			t.Fatalf("challenge %d: %d %+v", i, code, a)
		}
		if i%3 == 0 { // a garbage attestation with it
			attestPost(t, tg, "apple", ip, fmt.Sprintf(`{"device_id":"flood-%d","key_id":"AAAA","attestation_object":"AAAA","challenge":%q}`, i, a.Challenge))
		}
	}
	if n := tg.redisKeys(t, "{device:*"); n > 0 {
		t.Errorf("300 challenges and 100 garbage attestations left %d keys of devices in Redis; want none", n)
	}
}
