package bucket

import (
	"testing"
	"time"
)

// fuzzReplyRequest is a decision of every shape parsePacked reads: a
// bucket, a quota and a concurrency limit, a subject the caller's cache
// knew and one read from its hash, and an own bucket for a device.
func fuzzReplyRequest() *Request {
	return &Request{
		Cost: 1,
		Limits: []Limit{
			{Key: "b", Burst: 10, Rate: 1, Period: time.Second, Subjects: 3, OwnKey: "b:own"},
			{Key: "q", Kind: KindQuota, Burst: 5, Calendar: Day, Subjects: 1},
			{Key: "c", Kind: KindConcurrency, Burst: 2, LeaseTTL: time.Minute, Subjects: 2},
		},
		Subjects: []RequestSubject{
			{Key: "s1", Static: 1, Unverified: 1, Cached: true, Mult: 0.5, Pen: 1e15},
			{Key: "s2", Static: 1, Unverified: 1},
		},
		Device:   "d1",
		OwnTrust: "trust",
	}
}

// FuzzParsePacked feeds decide.lua's reply decoder arbitrary bytes: it
// must reject a reply of the wrong length, and answer one result per limit
// and per subject for any reply of the right one, without panicking.
func FuzzParsePacked(f *testing.F) {
	req := fuzzReplyRequest()
	// allowed, now, limit 1 (tokens), limit 2 and 3 (tokens, effb, reset,
	// retry), subject 2 (mult, pen), trusted
	f.Add(string(appendF64(nil, 1, 1.7e15, 9e6, 4e6, 5e6, 1.8e15, 0, 1e6, 2e6, 1.7e15, 0, 1, 0, 1)))
	f.Add(string(appendF64(nil, 0, 1.7e15, -1-0.5e6, 0, 5e6, 1.8e15, 0)))
	f.Add("")
	f.Fuzz(func(t *testing.T, b string) {
		var res Result
		if err := parsePacked(b, req, &res); err != nil {
			return
		}
		if len(b) != 8*14 {
			t.Fatalf("reply of %d bytes accepted", len(b))
		}
		if len(res.Limits) != len(req.Limits) || len(res.Subjects) != len(req.Subjects) {
			t.Fatalf("%d limits, %d subjects", len(res.Limits), len(res.Subjects))
		}
		if res.Subjects[0].Read || !res.Subjects[1].Read {
			t.Fatalf("subjects read %v %v", res.Subjects[0].Read, res.Subjects[1].Read)
		}
	})
}
