package rls

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

func testEnvoy(t testing.TB) *policy.Envoy {
	t.Helper()
	p, err := policy.Parse("rls.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return p.Envoy
}

func req(hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "mobile-api", HitsAddend: hits, Descriptors: ds}
}

func TestMap(t *testing.T) {
	t.Parallel()
	e := testEnvoy(t)
	ip := netip.MustParseAddr("192.0.2.1")
	many := &commonv3.RateLimitDescriptor{}
	for i := 0; i < MaxEntries+1; i++ {
		many.Entries = append(many.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "generic_key", Value: "x"})
	}
	tests := []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		want    engine.Input
		wantErr string
	}{
		{"everything", req(2, desc("remote_address", "::ffff:192.0.2.1", "generic_key", "ignored"), desc("method", "POST", "path", "/auth/login?next=/x#f"),
			desc("user_id", "u_1", "device_id", "d_1", "account", " Bob@Example.COM "), desc("plan", "free")),
			engine.Input{Endpoint: "POST /auth/login", IP: "192.0.2.1", Addr: ip, UserID: "u_1", DeviceID: "d_1", Account: "bob@example.com",
				Cost: 2, Attributes: map[string]string{"plan": "free"}}, ""},
		{"nothing", req(0), engine.Input{Cost: 1}, ""},
		{"method without path: no route", req(0, desc("method", "GET")), engine.Input{Cost: 1}, ""},
		{"path without method: no route", req(0, desc("path", "/x")), engine.Input{Cost: 1}, ""},
		{"empty values are absent", req(0, desc("remote_address", "", "user_id", "")), engine.Input{Cost: 1}, ""},
		{"same value twice", req(0, desc("remote_address", "192.0.2.1"), desc("remote_address", "192.0.2.1")),
			engine.Input{IP: "192.0.2.1", Addr: ip, Cost: 1}, ""},
		{"descriptor hits win", req(1, &commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(7)}), engine.Input{Cost: 7}, ""},
		{"negative descriptors skipped", req(0, &commonv3.RateLimitDescriptor{IsNegativeHits: true, HitsAddend: wrapperspb.UInt64(9),
			Entries: desc("user_id", "u").Entries}), engine.Input{Cost: 1}, ""},
		{"bad ip", req(0, desc("remote_address", "1.2.3")), engine.Input{}, `rls: entry "remote_address": not an IP address: "1.2.3"`},
		{"ipv6 in canonical form", req(0, desc("remote_address", "2001:DB8:0::1")),
			engine.Input{IP: "2001:db8::1", Addr: netip.MustParseAddr("2001:db8::1"), Cost: 1}, ""},
		{"ipv4 with a leading zero", req(0, desc("remote_address", "192.0.2.01")), engine.Input{},
			`rls: entry "remote_address": not an IP address: "192.0.2.01"`},
		{"zoned ip", req(0, desc("remote_address", "fe80::1%eth0")), engine.Input{}, `rls: entry "remote_address": not an IP address: "fe80::1%eth0"`},
		{"bad method", req(0, desc("method", "GE T")), engine.Input{}, `rls: entry "method": not an HTTP method: "GE T"`},
		{"relative path", req(0, desc("path", "x")), engine.Input{}, `rls: entry "path": the path must start with /: "x"`},
		{"control in path", req(0, desc("path", "/a\x01")), engine.Input{}, `rls: entry "path": the path has a space or control character`},
		// the path as route matching sees it in proxy mode (policy.RoutePath, 6.4)
		{"encoded slash", req(0, desc("method", "POST", "path", "/auth%2Flogin")), engine.Input{Endpoint: "POST /auth/login", Cost: 1}, ""},
		{"encoded slash, lower-case", req(0, desc("method", "POST", "path", "/auth%2flogin?x=1")), engine.Input{Endpoint: "POST /auth/login", Cost: 1}, ""},
		{"encoded unreserved", req(0, desc("method", "POST", "path", "/auth/%6cogin")), engine.Input{Endpoint: "POST /auth/login", Cost: 1}, ""},
		{"dot segments, slashes", req(0, desc("method", "POST", "path", "//auth/./x/../login/")), engine.Input{Endpoint: "POST /auth/login", Cost: 1}, ""},
		{"encoded dot segment", req(0, desc("method", "POST", "path", "/auth/x/%2e%2e/login")), engine.Input{Endpoint: "POST /auth/login", Cost: 1}, ""},
		{"encoded space kept", req(0, desc("method", "GET", "path", "/files/a%20b")), engine.Input{Endpoint: "GET /files/a b", Cost: 1}, ""},
		{"stray percent", req(0, desc("method", "GET", "path", "/100%")), engine.Input{Endpoint: "GET /100%", Cost: 1}, ""},
		{"same path, two spellings", req(0, desc("method", "POST", "path", "/auth/login"), desc("path", "/auth%2Flogin")),
			engine.Input{Endpoint: "POST /auth/login", Cost: 1}, ""},
		{"encoded control in path", req(0, desc("path", "/a%00")), engine.Input{}, `rls: entry "path": the path has a control character once decoded`},
		{"encoded bad utf-8 in path", req(0, desc("path", "/caf%E9")), engine.Input{}, `rls: entry "path": the path is not valid UTF-8 once decoded`},
		{"long user", req(0, desc("user_id", strings.Repeat("u", 257))), engine.Input{}, `rls: entry "user_id" (user) is longer than 256 bytes`},
		{"control device", req(0, desc("device_id", "d\x00")), engine.Input{}, `rls: entry "device_id" (device) contains a control character`},
		{"conflict", req(0, desc("user_id", "a"), desc("user_id", "b")), engine.Input{}, `rls: user is given two different values ("a", then "b" in entry "user_id")`},
		{"attr conflict", req(0, desc("plan", "a"), desc("plan", "b")), engine.Input{}, `rls: attribute "plan" is given two different values ("a", then "b" in entry "plan")`},
		{"long attr", req(0, desc("plan", strings.Repeat("p", 257))), engine.Input{}, `rls: entry "plan": attribute "plan" is longer than 256 bytes`},
		{"control in attr", req(0, desc("plan", "a\x01")), engine.Input{}, `rls: entry "plan": attribute "plan" contains a control character`},
		{"huge hits", req(1_000_001), engine.Input{}, `rls: hits_addend 1000001 is more than 1000000`},
		{"too many entries", req(0, many), engine.Input{}, `rls: descriptor 0: more than 64 entries`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var in engine.Input
			err := Map(e, tt.req, &in)
			if tt.wantErr != "" {
				var re *RequestError
				if err == nil || err.Error() != tt.wantErr || !errors.As(err, &re) {
					t.Fatalf("err = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(in, tt.want) {
				t.Fatalf("Map = %+v, %v\nwant %+v", in, err, tt.want)
			}
		})
	}
	ds := make([]*commonv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range ds {
		ds[i] = desc()
	}
	var in engine.Input
	if err := Map(e, req(0, ds...), &in); err == nil || err.Error() != "rls: more than 64 descriptors" {
		t.Fatalf("too many descriptors: %v", err)
	}
}

// FuzzMap decodes a RateLimitRequest as gRPC does (protobuf wire bytes)
// and maps it: Map never panics, and whatever it accepts the engine
// decides without error, within the bounds.
func FuzzMap(f *testing.F) {
	for _, r := range []*rlsv3.RateLimitRequest{
		feed("u_1", 3),
		req(0, desc("remote_address", "2001:db8::1", "method", "POST", "path", "/auth/login?x", "account", "Ä@x", "plan", "free")),
		req(5, &commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(1 << 40), IsNegativeHits: true}),
		req(0, desc("user_id", "a"), desc("user_id", "b")),
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	e := testEnvoy(f)
	p, _ := policy.Parse("rls.yaml", []byte(testPolicy))
	eng, err := engine.New(engine.Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{MaxKeys: 1000}), Policy: func() *policy.Policy { return p }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r rlsv3.RateLimitRequest
		if proto.Unmarshal(data, &r) != nil {
			return
		}
		var in engine.Input
		if err := Map(e, &r, &in); err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error of another type: %v", err)
			}
			return
		}
		_, path, _ := strings.Cut(in.Endpoint, " ")
		if in.Cost < 1 || in.Cost > 1_000_000 || len(in.Attributes) > policy.MaxAttributes || strings.ContainsFunc(path, isControl) {
			t.Fatalf("out of bounds: %+v", in)
		}
		if in.IP != "" && (!in.Addr.IsValid() || in.Addr.String() != in.IP) {
			t.Fatalf("ip %q addr %v", in.IP, in.Addr)
		}
		var d engine.Decision
		in.Now = time.Unix(1713522600, 0)
		if err := eng.Decide(context.Background(), &in, &d); err != nil {
			t.Fatalf("the engine refused a mapped request %+v: %v", in, err)
		}
	})
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// allUTF8 reports whether every string of m is UTF-8.
func allUTF8(m *rlsv3.RateLimitRequest) bool {
	if !utf8.ValidString(m.Domain) {
		return false
	}
	for _, d := range m.Descriptors {
		for _, e := range d.Entries {
			if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
				return false
			}
		}
	}
	return true
}

// replacedNonUTF8 reports whether a RateLimitRequest's encoding gives a
// string field (the domain, an entry's key or value) a value that is not
// UTF-8 and then, later in the same message, another value.
func replacedNonUTF8(data []byte) bool {
	return replaced(data, 1, func(num protowire.Number, v []byte) bool {
		return num == 2 && eachSub(v, 1, func(entry []byte) bool { return replaced(entry, 1, nil) || replaced(entry, 2, nil) })
	})
}

// replaced reports whether field str of the message msg has a value that
// is not UTF-8 followed by another value, or sub says so of a field.
func replaced(msg []byte, str protowire.Number, sub func(protowire.Number, []byte) bool) bool {
	bad := false
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return false
		}
		msg = msg[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(msg)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 {
			return false
		}
		msg = msg[n:]
		switch {
		case typ != protowire.BytesType:
		case num == str && bad:
			return true
		case num == str:
			bad = !utf8.Valid(v)
		case sub != nil && sub(num, v):
			return true
		}
	}
	return false
}

// eachSub reports whether f holds for one of msg's field-num messages.
func eachSub(msg []byte, num protowire.Number, f func([]byte) bool) bool {
	found := false
	replaced(msg, 0, func(n protowire.Number, v []byte) bool {
		found = found || n == num && f(v)
		return found
	})
	return found
}

// FuzzUnmarshalRequest: the fast decoder of the gRPC codec always gives
// proto.Unmarshal's result (or its error), also when its storage was
// used by an earlier request; except that a message of the plain form
// proto.Unmarshal refuses only for strings that are not UTF-8 is decoded
// (Map then refuses a mapped value that is not UTF-8).
func FuzzUnmarshalRequest(f *testing.F) {
	for _, r := range []*rlsv3.RateLimitRequest{
		feed("u_1", 3),
		req(0, desc("remote_address", "2001:db8::1", "method", "POST", "path", "/auth/login?x", "account", "Ä@x", "plan", "free")),
		req(5, &commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(1 << 40), IsNegativeHits: true}, desc("k", "")),
		req(0, &commonv3.RateLimitDescriptor{Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3}}),
		{Domain: "other"},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	f.Add([]byte{0x0a, 0x01, 0xff})                                                 // invalid UTF-8 domain
	f.Add([]byte{0x12, 0x04, 0x1a, 0x02, 0x08, 0x01})                               // hits_addend wrapper
	f.Add([]byte{0x12, 0x09, 0x0a, 0x03, 0x12, 0x01, 0xff, 0x12, 0x02, 0x08, 0x03}) // a value not UTF-8 beside a limit override
	f.Add([]byte{0x0a, 0x01, 0xff, 0xf8, 0x06, 0x01})                               // a domain not UTF-8 and an unknown field
	var over []byte                                                                 // over the bounds: 65 empty descriptors, then one of 65 empty entries
	for range MaxDescriptors + 1 {
		over = append(over, 0x12, 0x00)
	}
	f.Add(over)
	f.Add(append([]byte{0x12, 2 * (MaxEntries + 1)}, bytes.Repeat([]byte{0x0a, 0x00}, MaxEntries+1)...))
	e := testEnvoy(f)
	keys := make([]string, 0, len(e.Entries))
	for k := range e.Entries {
		keys = append(keys, k)
	}
	in := newInterner(e.Domain, keys)
	warm, _ := proto.Marshal(feed("u_warm", 2))
	f.Fuzz(func(t *testing.T, data []byte) {
		var want rlsv3.RateLimitRequest
		wantErr := proto.Unmarshal(data, &want)
		p := new(pooledRequest)
		if err := p.unmarshal(warm, in); err != nil {
			t.Fatal(err)
		}
		err := p.unmarshal(data, in)
		if over, _ := bounds(data); over {
			// over the bounds, what is over them is not decoded
			// (overBounds): the message decodes to one Map refuses so
			if wantErr == nil && !overTheBounds(&want) {
				t.Fatalf("refused unread as over the bounds: %v", &want)
			}
			var mi engine.Input
			if err != nil || Map(e, &p.msg, &mi) == nil || wantErr == nil && p.msg.Domain != want.Domain {
				t.Fatalf("over the bounds: decoded %v (%v), Map accepts it or the domain is not %q", &p.msg, err, want.Domain)
			}
			return
		}
		if err == nil && wantErr != nil {
			// only for a string that is not UTF-8 (Map then denies it when
			// mapped), or was and was replaced by a later value of its
			// field, as protobuf's last-one-wins has it (proto.Unmarshal
			// still refuses the message for the first); and decoded as
			// proto.Unmarshal decodes the message with its strings made
			// valid, the strings then put back as sent
			if !strings.Contains(wantErr.Error(), "invalid UTF-8") || allUTF8(&p.msg) && !replacedNonUTF8(data) {
				t.Fatalf("decoded %v, proto.Unmarshal's %v", &p.msg, wantErr)
			}
			v, changed := toValidUTF8(data, p.msg.ProtoReflect().Descriptor())
			var made rlsv3.RateLimitRequest
			if !changed || proto.Unmarshal(v, &made) != nil {
				t.Fatalf("decoded %v, which proto.Unmarshal refuses with its strings made valid", &p.msg)
			}
			restoreStrings(data, &made)
			if !proto.Equal(&made, &p.msg) {
				t.Fatalf("decoded %v, want %v", &p.msg, &made)
			}
			return
		}
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("err %v, proto.Unmarshal's %v", err, wantErr)
		}
		if err == nil && !proto.Equal(&p.msg, &want) {
			t.Fatalf("decoded %v\nproto.Unmarshal %v", &p.msg, &want)
		}
	})
}

// overTheBounds reports whether r has more than MaxDescriptors
// descriptors or one of more than MaxEntries entries.
func overTheBounds(r *rlsv3.RateLimitRequest) bool {
	if len(r.Descriptors) > MaxDescriptors {
		return true
	}
	for _, d := range r.Descriptors {
		if len(d.Entries) > MaxEntries {
			return true
		}
	}
	return false
}
