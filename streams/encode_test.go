package streams

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// FuzzAppendDecisionBatch: the hand-written encoder writes what
// encoding/json writes, byte for byte, and fails where it fails.
func FuzzAppendDecisionBatch(f *testing.F) {
	f.Add(int64(1_800_000_000_123_456_789), "r1", "POST /v1/login", "login", "/v1/login*", "login-ip", true, "allowed", int64(4), "198.51.100.7", "64500", "u_1", "d_1", "alice", false, "plan", "free", 1.0, 1, "bucket", "")
	f.Add(int64(0), "\"<&>\"", "\x00\n\t\u2028", "", "", "", false, "limited", int64(-1), "\xff", "", "", "", "", true, "", "", 0.000001, 2, "concurrency", "01JLEASE\x00\"")
	f.Add(int64(-62135596800_000_000_0), "", "", "", "", "", false, "", int64(0), "", "", "", "", "", false, "k", "v", math.Inf(1), 0, "", "")
	f.Add(int64(253402300800_000_000_0), "", "", "", "", "", false, "", int64(0), "", "", "", "", "", false, "", "", math.NaN(), 3, "quota", "l")
	f.Add(int64(1_800_000_000_123_456_789), "r2", "POST /v1/attest/apple", "write", "", "attestation-ip", false, "limited", int64(0), "198.51.100.7", "", "", "", "", false, "", "", 1.0, 5, "bucket", "")
	f.Fuzz(func(t *testing.T, ts int64, rid, endpoint, class, route, limit string, allowed bool, result string, remaining int64,
		ip, asn, user, device, account string, verified bool, ak, av string, cost float64, n int, kind, lease string) {
		d := Decision{TS: time.Unix(0, ts).UTC(), RequestID: rid, Endpoint: endpoint, Class: class, Route: route, Limit: limit,
			Allowed: allowed, Result: result, Remaining: remaining, IP: ip, ASN: asn, UserID: user, DeviceID: device,
			Account: account, DeviceVerified: verified, Cost: cost, Kind: kind, LeaseID: lease,
			AttestationBudget: n&4 != 0} // n%4 decisions, bit 2 the budget's flag
		if ak != "" {
			d.Attributes = map[string]string{ak: av, "tenant": av + ak, "app_version": ak}
		}
		b := DecisionBatch{V: SchemaVersion}
		for i := 0; i < n%4; i++ {
			b.Decisions = append(b.Decisions, d)
			d.TS = d.TS.Add(time.Duration(i) * time.Millisecond)
		}
		want, werr := json.Marshal(&b)
		got, gerr := AppendDecisionBatch([]byte("prefix"), &b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("errors differ: encoding/json %v, AppendDecisionBatch %v", werr, gerr)
		}
		if werr == nil && (!bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want)) {
			t.Fatalf("AppendDecisionBatch wrote\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// BenchmarkEncodeDecisionBatch: a publisher's batch of 64 decisions.
func BenchmarkEncodeDecisionBatch(b *testing.B) {
	batch := DecisionBatch{V: SchemaVersion}
	for i := 0; i < 64; i++ {
		batch.Decisions = append(batch.Decisions, Decision{TS: time.Unix(1_800_000_000, int64(i)).UTC(), RequestID: "01JBENCH0000000000000000", Endpoint: "POST /bench",
			Class: "default", Route: "POST /bench", Limit: "user", Allowed: true, Result: "allowed", Remaining: 99, IP: "10.0.0.1", UserID: "u_1", DeviceID: "d_1", Cost: 1})
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := json.Marshal(&batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for i := 0; i < b.N; i++ {
			var err error
			if buf, err = AppendDecisionBatch(buf[:0], &batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}
