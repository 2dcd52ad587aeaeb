package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

const attrPolicy = `version: 1
routes:
  - {match: "* *", class: write}
limits:
  - {name: tenant,    by: [attr:tenant],        rate: 1000/min}
  - {name: plan-ip,   by: [ip, attr:plan],      rate: 100/min}
  - {name: free-user, by: [user],               rate: 10/min, if: {attr: {plan: [free, trial]}}}
  - {name: otp,       by: [attr:phone, route],  rate: 3/h}
`

func TestAttributeKeysAndConditions(t *testing.T) {
	t.Parallel()
	rs := &recordingStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	e := newEngine(t, attrPolicy, rs)
	cases := []struct {
		name  string
		attrs map[string]string
		keys  []string
	}{
		{"none", nil, nil},
		{"plan free", map[string]string{"plan": "free"}, []string{
			"tg:{ip:198.51.100.7}:b:plan-ip|free", "tg:{user:u_1}:b:free-user"}},
		{"plan paid: condition fails", map[string]string{"plan": "paid", "tenant": "acme"}, []string{
			"tg:{attr:tenant:acme}:b:tenant", "tg:{ip:198.51.100.7}:b:plan-ip|paid"}},
		{"escaped values", map[string]string{"tenant": "a:b}|c", "phone": "+1 555", "plan": "trial"}, []string{
			"tg:{attr:tenant:a%3Ab%7D%7Cc}:b:tenant", "tg:{ip:198.51.100.7}:b:plan-ip|trial",
			"tg:{user:u_1}:b:free-user", "tg:{attr:phone:+1%20555}:b:otp|*%20*"}},
		{"empty value is absent", map[string]string{"tenant": "", "plan": "free"}, []string{
			"tg:{ip:198.51.100.7}:b:plan-ip|free", "tg:{user:u_1}:b:free-user"}},
	}
	for _, c := range cases {
		rs.req = bucket.Request{}
		in := Input{Endpoint: "POST /otp", IP: "198.51.100.7", UserID: "u_1", Cost: 1, Attributes: c.attrs}
		var d Decision
		if err := e.Decide(context.Background(), &in, &d); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range rs.req.Limits {
			got = append(got, l.Key)
		}
		if len(got) != len(c.keys) {
			t.Errorf("%s: keys %q, want %q", c.name, got, c.keys)
			continue
		}
		for i := range got {
			if got[i] != c.keys[i] {
				t.Errorf("%s: key %d %q, want %q", c.name, i, got[i], c.keys[i])
			}
		}
		if len(d.Applied()) != len(c.keys) {
			t.Errorf("%s: applied %d", c.name, len(d.Applied()))
		}
	}
}

// noStore fails the test when a decision reaches it.
type noStore struct {
	*bucket.MemoryStore
	calls int
}

func (s *noStore) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	s.calls++
	return s.MemoryStore.Decide(ctx, req, res)
}

func writeFile(t testing.TB, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func listPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "bad-ips.txt", "# scanners\n203.0.113.0/24\n2001:db8:bad::/48 # v6 farm\n")
	writeFile(t, dir, "staff.txt", "Alice@Example.com\n")
	writeFile(t, dir, "office.txt", "198.51.100.0/24\n203.0.113.9\n")
	writeFile(t, dir, "asns.txt", "AS64500\n")
	writeFile(t, dir, "tenants.txt", "acme\n")
	writeFile(t, dir, "stolen.txt", "stolen-phone\n")
	path := writeFile(t, dir, "p.yaml", `version: 1
lists:
  bad-ips: {file: bad-ips.txt, kind: ip}
  staff:   {file: staff.txt, kind: account}
  office:  {file: office.txt, kind: ip}
  bad-asn: {file: asns.txt, kind: asn}
  vip:     {file: tenants.txt, kind: "attr:tenant"}
  stolen:  {file: stolen.txt, kind: device}
allow: [staff, office, vip]
deny: [bad-ips, bad-asn, stolen]
limits:
  - {name: ip, by: [ip], rate: 1/min}
`)
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLists(t *testing.T) {
	t.Parallel()
	p := listPolicy(t)
	st := &noStore{MemoryStore: bucket.NewMemoryStore(bucket.MemoryOptions{})}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, err := New(Options{Store: st, Policy: func() *policy.Policy { return p }, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   Input
		want Outcome
		list string
	}{
		{"deny cidr", Input{IP: "203.0.113.77"}, DeniedList, "bad-ips"},
		{"deny wins over allow", Input{IP: "203.0.113.9"}, DeniedList, "bad-ips"},
		{"deny v6", Input{IP: "2001:db8:bad:1::5"}, DeniedList, "bad-ips"},
		{"deny asn", Input{IP: "192.0.2.1", ASN: "64500"}, DeniedList, "bad-asn"},
		{"allow office", Input{IP: "198.51.100.200"}, AllowedList, "office"},
		{"allow account normalised", Input{IP: "192.0.2.1", Account: "  ALICE@example.COM "}, AllowedList, "staff"},
		{"allow attribute", Input{IP: "192.0.2.1", Attributes: map[string]string{"tenant": "acme"}}, AllowedList, "vip"},
		{"deny beats attribute allow", Input{IP: "203.0.113.1", Attributes: map[string]string{"tenant": "acme"}}, DeniedList, "bad-ips"},
		// a device list matches only a device proven by its token (7.1)
		{"deny proven device", Input{IP: "192.0.2.1", DeviceID: "stolen-phone", DeviceVerified: true}, DeniedList, "stolen"},
		{"bare id of a denied device", Input{IP: "192.0.2.1", DeviceID: "stolen-phone", Account: "alice@example.com"}, AllowedList, "staff"},
	}
	for _, c := range cases {
		c.in.Endpoint, c.in.Cost = "GET /", 1
		var d Decision
		for i := 0; i < 3; i++ { // far past the 1/min limit
			if err := e.Decide(context.Background(), &c.in, &d); err != nil {
				t.Fatal(err)
			}
		}
		if d.Outcome != c.want || d.List == nil || d.List.Name != c.list || d.Binding != nil {
			t.Errorf("%s: outcome %v list %v", c.name, d.Outcome, d.List)
		}
	}
	if st.calls != 0 {
		t.Fatalf("lists made %d store calls", st.calls)
	}
	if got := testutil.ToFloat64(m.Decisions.WithLabelValues("bad-ips", "default", ResultDeniedList)); got != 12 {
		t.Errorf("denied_list bad-ips = %v, want 12", got)
	}
	if got := testutil.ToFloat64(m.Decisions.WithLabelValues("staff", "default", ResultAllowedList)); got != 6 {
		t.Errorf("allowed_list staff = %v, want 6", got)
	}
	// Not on a list: the limit applies, through the store.
	in := Input{Endpoint: "GET /", IP: "192.0.2.1", Cost: 1}
	var d Decision
	_ = e.Decide(context.Background(), &in, &d)
	_ = e.Decide(context.Background(), &in, &d)
	if d.Outcome != Limited || st.calls != 2 {
		t.Fatalf("unlisted: %v after %d store calls", d.Outcome, st.calls)
	}
	if errors.Is(d.Err, bucket.ErrUnavailable) {
		t.Fatal(d.Err)
	}
	// The bare id of a denied device is on no list: limited like anyone.
	in = Input{Endpoint: "GET /", IP: "192.0.2.2", DeviceID: "stolen-phone", Cost: 1}
	_ = e.Decide(context.Background(), &in, &d)
	_ = e.Decide(context.Background(), &in, &d)
	if d.Outcome != Limited || d.List != nil || st.calls != 4 {
		t.Fatalf("bare id of a denied device: %v list %v after %d store calls", d.Outcome, d.List, st.calls)
	}
}

// BenchmarkDecide4Attrs is BenchmarkDecide4 with attribute key parts and
// conditions, and allow and deny lists the request is not on.
func BenchmarkDecide4Attrs(b *testing.B) {
	dir := b.TempDir()
	writeFile(b, dir, "ips.txt", "203.0.113.0/24\n")
	writeFile(b, dir, "plans.txt", "internal\n")
	path := writeFile(b, dir, "p.yaml", `version: 1
routes:
  - {match: "POST /bench", class: write}
lists:
  bad: {file: ips.txt, kind: ip}
  internal: {file: plans.txt, kind: "attr:plan"}
allow: [internal]
deny: [bad]
limits:
  - {name: ip, by: [ip, attr:plan], rate: 1000000000/s}
  - {name: user, by: [user], rate: 1000000000/s, if: {attr: {plan: [free, trial]}}}
  - {name: tenant, by: [attr:tenant], rate: 1000000000/s}
  - {name: route, by: [route], rate: 1000000000/s}
`)
	p, err := policy.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p }})
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Endpoint: "POST /bench", IP: "10.1.2.3", UserID: "u_1", DeviceID: "d_1", Cost: 1,
		Attributes: map[string]string{"plan": "free", "tenant": "acme"}}
	var d Decision
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := e.Decide(ctx, &in, &d); err != nil {
			b.Fatal(err)
		}
		if len(d.Applied()) != 4 {
			b.Fatalf("applied %d", len(d.Applied()))
		}
	}
}
