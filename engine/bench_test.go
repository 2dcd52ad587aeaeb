package engine

import (
	"context"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// BenchmarkDecide4Spread is scripts/bench's request shape without HTTP and
// Redis: 4 layered limits over 10,000 (ip, user, device) keys, with the
// L1 cache (multipliers included) and the decision metrics on, as the
// limiter runs it. The memory store stands in for Redis; the L1's subject
// lookups and puts and the metrics are the same work either way.
func BenchmarkDecide4Spread(b *testing.B) {
	p, err := policy.Parse("p.yaml", []byte(`version: 1
routes:
  - {match: "POST /bench", class: write}
limits:
  - {name: ip, by: [ip], rate: 1000000000/s}
  - {name: user, by: [user], rate: 1000000000/s}
  - {name: device, by: [device], rate: 1000000000/s}
  - {name: route, by: [route], rate: 1000000000/s}
`))
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(Options{Store: bucket.NewMemoryStore(bucket.MemoryOptions{}), Policy: func() *policy.Policy { return p },
		L1: NewL1(L1Options{}), Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	ins := make([]Input, 10000)
	for i := range ins {
		id := strconv.Itoa(i)
		ins[i] = Input{Endpoint: "POST /bench", IP: "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256), UserID: "u_" + id, DeviceID: "d_" + id, Cost: 1}
	}
	var d Decision
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in := ins[(i*7919)%len(ins)]
		if err := e.Decide(ctx, &in, &d); err != nil {
			b.Fatal(err)
		}
	}
}
