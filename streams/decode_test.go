package streams_test

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/streams"
)

// sampleBatch is what the publisher sends: json.Marshal of a batch.
func sampleBatch(tb testing.TB, n int) []byte {
	tb.Helper()
	b := streams.DecisionBatch{V: streams.SchemaVersion}
	ts := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	for i := 0; i < n; i++ {
		id := strconv.Itoa(i)
		b.Decisions = append(b.Decisions, streams.Decision{
			TS: ts.Add(time.Duration(i) * time.Millisecond), RequestID: "01JDQ7Z3K4" + id, Endpoint: "POST /auth/login",
			Class: "auth", Route: "POST /auth/login", Limit: "login-ip", Allowed: i%3 != 0, Result: "limited",
			Remaining: int64(i - 2), IP: "198.51.100." + id, ASN: "64500", UserID: "u_" + id, DeviceID: "d_" + id, Account: "alice@example.com",
			Cost: float64(i % 4), DeviceVerified: i%2 == 0,
		})
		if i%4 == 1 {
			b.Decisions[i].Kind, b.Decisions[i].LeaseID = "concurrency", "01JDQ7ZLEASE"+id
		}
		if i%5 == 0 {
			b.Decisions[i].Attributes = map[string]string{"plan": "free", "app_version": "5.2." + id}
		}
	}
	data, err := json.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// decodeCases are inputs on and off the fast path; each must decode
// exactly as encoding/json decodes it.
var decodeCases = []string{
	`{"v":1,"decisions":[]}`,
	`{"v":1}`,
	`{}`,
	` { "v" : 1 , "decisions" : [ { "ip" : "1.2.3.4" , "allowed" : true } ] } `,
	`{"v":1,"decisions":[{"ts":"2026-11-30T12:00:00.5Z","remaining":-3,"allowed":false}]}`,
	`{"v":1,"decisions":[{"endpoint":"GET /a\u0026b","user_id":"\u00e9"}]}`,
	`{"v":1,"decisions":[{"account":"zoë@example.com","device_id":"日本"}]}`,
	`{"v":1,"decisions":[{"device_id":"d1","device_verified":true},{"device_verified":false}]}`,
	`{"v":1,"decisions":[{"endpoint":"POST /v1/attest/apple","limit":"attestation-ip","attestation_budget":true},{"attestation_budget":false}]}`,
	`{"v":1,"decisions":[{"attestation_budget":"yes"}]}`,
	"{\"v\":1,\"decisions\":[{\"account\":\"bad \xff utf8\"}]}",
	`{"V":1,"Decisions":[{"IP":"1.2.3.4"}]}`,
	`{"v":1,"decisions":[{"ip":null,"remaining":null,"ts":null,"allowed":null}]}`,
	`{"v":1,"decisions":null}`,
	`{"v":1,"decisions":[{"ip":"a"}],"decisions":[{"class":"b"}]}`,
	`{"v":1,"decisions":[{"ip":"a","ip":"b"}]}`,
	`{"v":1,"decisions":[{"remaining":1.5}]}`,
	`{"v":1,"decisions":[{"remaining":1e2}]}`,
	`{"v":1,"decisions":[{"remaining":01}]}`,
	`{"v":1,"decisions":[{"remaining":99999999999999999999}]}`,
	`{"v":1,"decisions":[{"remaining":-0}]}`,
	`{"v":1,"decisions":[{"ts":"yesterday"}]}`,
	`{"v":1,"decisions":[{"extra":{"nested":[1,2,{"x":"y"}]},"ip":"1"}]}`,
	`{"v":1,"decisions":[{"ip":5}]}`,
	`{"v":1,"decisions":[{"allowed":truex}]}`,
	`{"v":1,"decisions":[{"ip":"1"}]} trailing`,
	`{"v":1,"decisions":[{"ip":"1"},]}`,
	`{"v":"1"}`,
	`{"v":1,"decisions":[{"ip":"tab	inside"}]}`,
	`[]`,
	``,
	`{"v":1,"decisions":[{"ip":"1"}`,
	`{"v":1,"decisions":[{"ip":"1","cost":0}]}`,
	`{"v":1,"decisions":[{"cost":5,"attributes":{"plan":"free","tenant":"acme"}}]}`,
	`{"v":1,"decisions":[{"cost":-0}]}`,
	`{"v":1,"decisions":[{"cost":2.5}]}`,
	`{"v":1,"decisions":[{"cost":1e3}]}`,
	`{"v":1,"decisions":[{"cost":null}]}`,
	`{"v":1,"decisions":[{"attributes":{}}]}`,
	`{"v":1,"decisions":[{"attributes":null}]}`,
	`{"v":1,"decisions":[{"attributes":{"a":"1","a":"2"}}]}`,
	`{"v":1,"decisions":[{"attributes":{"a":"1"},"attributes":{"b":"2"}}]}`,
	`{"v":1,"decisions":[{"attributes":{"a":1}}]}`,
	`{"v":1,"decisions":[{"attributes":{"\u0061":"x"}}]}`,
	`{"v":1,"decisions":[{"attributes":["a"]}]}`,
	`{"v":1,"decisions":[null]}`,
	`{"v":1,"decisions":[{"device_verified":true,"cost":3}]}`,
	`{"v":1,"decisions":[{"device_verified":"yes"}]}`,
	`{"v":1,"decisions":[{"limit":"exports","kind":"concurrency","lease_id":"01JLEASE"},{"kind":"quota"}]}`,
	`{"v":1,"decisions":[{"kind":null,"lease_id":5}]}`,
}

func decodeBoth(t *testing.T, data []byte) {
	t.Helper()
	var fast streams.DecisionBatch
	errFast := streams.DecodeDecisionBatch(data, &fast)
	var std streams.DecisionBatch
	errStd := json.Unmarshal(data, &std)
	if (errFast == nil) != (errStd == nil) {
		t.Fatalf("%q: error %v, encoding/json says %v", data, errFast, errStd)
	}
	if errStd == nil && !reflect.DeepEqual(fast, std) {
		t.Fatalf("%q:\n got %+v\nwant %+v", data, fast, std)
	}
	// and into a batch that held decisions before
	reused := streams.DecisionBatch{V: 9, Decisions: make([]streams.Decision, 3, 8)}
	reused.Decisions[0].IP = "stale"
	errReused := streams.DecodeDecisionBatch(data, &reused)
	if (errReused == nil) != (errStd == nil) {
		t.Fatalf("%q reused: error %v, encoding/json says %v", data, errReused, errStd)
	}
	if errStd != nil {
		return
	}
	if reused.V != std.V || len(reused.Decisions) != len(std.Decisions) || (reused.Decisions == nil) != (std.Decisions == nil) {
		t.Fatalf("%q reused:\n got %+v\nwant %+v", data, reused, std)
	}
	for i := range std.Decisions {
		if !reflect.DeepEqual(reused.Decisions[i], std.Decisions[i]) {
			t.Fatalf("%q reused decision %d:\n got %+v\nwant %+v", data, i, reused.Decisions[i], std.Decisions[i])
		}
	}
}

func TestDecodeDecisionBatchMatchesEncodingJSON(t *testing.T) {
	decodeBoth(t, sampleBatch(t, 50))
	for _, c := range decodeCases {
		decodeBoth(t, []byte(c))
	}
}

func FuzzDecodeDecisionBatch(f *testing.F) {
	f.Add(sampleBatch(f, 2))
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) { decodeBoth(t, data) })
}

// BenchmarkDecodeDecisionBatch decodes a batch of 64 decisions as the
// publisher writes them: the fast decoder against encoding/json.
func BenchmarkDecodeDecisionBatch(b *testing.B) {
	data := sampleBatch(b, 64)
	b.Run("fast", func(b *testing.B) {
		var batch streams.DecisionBatch
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if err := streams.DecodeDecisionBatch(data, &batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/decision")
	})
	b.Run("replay", func(b *testing.B) {
		var rd streams.ReplayDecoder
		var batch streams.DecisionBatch
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if err := rd.Decode(data, &batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/decision")
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			var batch streams.DecisionBatch
			if err := json.Unmarshal(data, &batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/decision")
	})
}

// TestDecisionWithoutCost: a decision recorded before events carried a
// cost decodes with cost 1, on both paths; a recorded cost 0 stays 0.
func TestDecisionWithoutCost(t *testing.T) {
	for _, c := range []struct {
		data string
		want float64
	}{
		{`{"v":1,"decisions":[{"ip":"1.2.3.4"}]}`, 1},
		{`{"v":1,"decisions":[{"ip":"1.2.3.4","cost":0}]}`, 0},
		{`{"v":1,"decisions":[{"ip":"1.2.3.4","cost":7}]}`, 7},
		{`{"v":1,"decisions":[{"ip":"1.2\u002e3.4"}]}`, 1}, // slow path
	} {
		var fast, std streams.DecisionBatch
		if err := streams.DecodeDecisionBatch([]byte(c.data), &fast); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(c.data), &std); err != nil {
			t.Fatal(err)
		}
		if fast.Decisions[0].Cost != c.want || std.Decisions[0].Cost != c.want {
			t.Errorf("%s: cost %v (encoding/json %v), want %v", c.data, fast.Decisions[0].Cost, std.Decisions[0].Cost, c.want)
		}
	}
}

// replayView is d with the outcome fields a ReplayDecoder leaves zero.
func replayView(d streams.Decision) streams.Decision {
	d.RequestID, d.Class, d.Route, d.Limit, d.Result, d.Remaining, d.Allowed = "", "", "", "", "", 0, false
	d.Kind, d.LeaseID = "", ""
	return d
}

// replayDecodeBoth checks that a ReplayDecoder, fresh and after decoding
// other messages, reads exactly what encoding/json reads, but the outcome.
func replayDecodeBoth(t *testing.T, rd *streams.ReplayDecoder, data []byte) {
	t.Helper()
	var std streams.DecisionBatch
	errStd := json.Unmarshal(data, &std)
	got := streams.DecisionBatch{V: 9, Decisions: make([]streams.Decision, 2, 4)}
	err := rd.Decode(data, &got)
	if (err == nil) != (errStd == nil) {
		t.Fatalf("%q: error %v, encoding/json says %v", data, err, errStd)
	}
	if errStd != nil {
		return
	}
	if got.V != std.V || len(got.Decisions) != len(std.Decisions) || (got.Decisions == nil) != (std.Decisions == nil) {
		t.Fatalf("%q:\n got %+v\nwant %+v", data, got, std)
	}
	for i := range std.Decisions {
		if want := replayView(std.Decisions[i]); !reflect.DeepEqual(got.Decisions[i], want) {
			t.Fatalf("%q decision %d:\n got %+v\nwant %+v", data, i, got.Decisions[i], want)
		}
	}
}

// FuzzReplayDecoder: the replay's decoder agrees with encoding/json on
// every field it reads, with its shared strings warm from other messages.
func FuzzReplayDecoder(f *testing.F) {
	f.Add(sampleBatch(f, 2))
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	warm := sampleBatch(f, 8)
	f.Fuzz(func(t *testing.T, data []byte) {
		var rd streams.ReplayDecoder
		replayDecodeBoth(t, &rd, data)
		var b streams.DecisionBatch
		_ = rd.Decode(warm, &b)
		replayDecodeBoth(t, &rd, data)
	})
}
