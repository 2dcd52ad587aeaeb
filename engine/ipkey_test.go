package engine

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

const ipv6Policy = `version: 1
identity:
  ipv6_prefix: %s
limits:
  - {name: per-ip, by: [ip], rate: 3/min}
`

// TestIPv6PrefixKeys: limits and multipliers keyed by ip key an IPv6
// client by its prefix (7.1), IPv4 and /128 by the whole address.
func TestIPv6PrefixKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ prefix, ip, bucket, mult string }{
		{"64", "2001:db8:1:2:aaaa::1", "tg:{ip:2001%3Adb8%3A1%3A2%3A%3A/64}:b:per-ip", "tg:{ip:2001%3Adb8%3A1%3A2%3A%3A/64}:m"},
		{"48", "2001:db8:1:2:aaaa::1", "tg:{ip:2001%3Adb8%3A1%3A%3A/48}:b:per-ip", "tg:{ip:2001%3Adb8%3A1%3A%3A/48}:m"},
		{"128", "2001:db8:1:2:aaaa::1", "tg:{ip:2001%3Adb8%3A1%3A2%3Aaaaa%3A%3A1}:b:per-ip", "tg:{ip:2001%3Adb8%3A1%3A2%3Aaaaa%3A%3A1}:m"},
		{"64", "198.51.100.7", "tg:{ip:198.51.100.7}:b:per-ip", "tg:{ip:198.51.100.7}:m"},
	} {
		rs := &recordingStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
		e := newEngine(t, fmt.Sprintf(ipv6Policy, c.prefix), rs)
		in := Input{IP: c.ip, Cost: 1}
		var d Decision
		if err := e.Decide(context.Background(), &in, &d); err != nil {
			t.Fatal(err)
		}
		if len(rs.req.Limits) != 1 || rs.req.Limits[0].Key != c.bucket || rs.req.Subjects[0].Key != c.mult {
			t.Errorf("prefix %s, %s: limits %+v subjects %+v; want %s and %s", c.prefix, c.ip, rs.req.Limits, rs.req.Subjects, c.bucket, c.mult)
		}
	}
}

// TestIPv6RotationSharesBucket: every address of one /64 spends one
// bucket; another /64 has its own; the default prefix is 64.
func TestIPv6RotationSharesBucket(t *testing.T) {
	t.Parallel()
	e := newEngine(t, "version: 1\nlimits:\n  - {name: per-ip, by: [ip], rate: 3/min}\n", bucket.NewMemoryStore(bucket.MemoryOptions{}))
	decide := func(ip string) Outcome {
		in := Input{IP: ip, Addr: netip.MustParseAddr(ip), Cost: 1}
		var d Decision
		if err := e.Decide(context.Background(), &in, &d); err != nil {
			t.Fatal(err)
		}
		return d.Outcome
	}
	for i, ip := range []string{"2001:db8:0:1::1", "2001:db8:0:1::2", "2001:db8:0:1:ffff::3", "2001:db8:0:1:1234:5678:9abc:def0"} {
		want := Allowed
		if i == 3 {
			want = Limited
		}
		if got := decide(ip); got != want {
			t.Errorf("request %d from %s: %v, want %v", i, ip, got, want)
		}
	}
	if got := decide("2001:db8:0:2::1"); got != Allowed {
		t.Errorf("another /64: %v, want Allowed", got)
	}
}

func TestIPKeyAllocs(t *testing.T) {
	p, _ := policy.Parse("p.yaml", []byte("version: 1\nlimits:\n  - {name: a, by: [ip], rate: 1/s}\n"))
	a := netip.MustParseAddr("198.51.100.7")
	if n := testing.AllocsPerRun(100, func() { _ = IPKey(p, "198.51.100.7", a) }); n != 0 {
		t.Errorf("IPKey of an IPv4 address allocates %v times", n)
	}
}
