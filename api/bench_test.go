package api

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
)

const benchPolicy = `version: 1
routes:
  - {match: "POST /bench", class: write}
limits:
  - {name: ip, by: [ip], rate: 100000/s}
  - {name: user, by: [user], rate: 100000/s}
  - {name: device, by: [device], rate: 100000/s}
  - {name: route, by: [route], rate: 10000000/s}
`

func benchServer(b *testing.B, store bucket.Store) *Server {
	p, err := policy.Parse("bench.yaml", []byte(benchPolicy))
	if err != nil {
		b.Fatal(err)
	}
	eng, _ := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }, Metrics: engine.NewMetrics(prometheus.NewRegistry())})
	s, _ := New(Options{Engine: eng})
	return s
}

func benchCheck(b *testing.B, s *Server) {
	bodies := make([]string, 10000)
	for i := range bodies {
		bodies[i] = `{"endpoint":"POST /bench","ip":"10.0.` + strconv.Itoa(i/256) + `.` + strconv.Itoa(i%256) + `","user_id":"u_` + strconv.Itoa(i) + `","device_id":"d_` + strconv.Itoa(i) + `","cost":1}`
	}
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := httptest.NewRequest("POST", "/v1/check", strings.NewReader(bodies[seq.Add(1)%int64(len(bodies))]))
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != 200 {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
	})
}

// BenchmarkCheckMemory is POST /v1/check through the handler (no network)
// with 4 layered limits over 10,000 keys in the memory store.
func BenchmarkCheckMemory(b *testing.B) {
	benchCheck(b, benchServer(b, bucket.NewMemoryStore(bucket.MemoryOptions{})))
}

// BenchmarkCheckRedis is the same against the shared Redis.
func BenchmarkCheckRedis(b *testing.B) {
	c, _ := testenv.Redis(b)
	rs := bucket.NewRedisStore(c, bucket.RedisOptions{Timeout: time.Second})
	defer rs.Close()
	b.SetParallelism(32)
	benchCheck(b, benchServer(b, rs))
}
