package rls

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate-dev/tollgate/bucket"
)

// storeCall is what one store decision named: its keys and numbers.
type storeCall struct {
	Now       time.Time
	Cost      float64
	Limits    []string // key, own key, burst, rate, period, subjects, kind of each
	Subjects  []bucket.RequestSubject
	Locks     []string
	TrustKeys []string
	Device    string
	OwnTrust  string
}

// recordingStore is a memory store that records every decision it is
// asked for. Once hold is called, each decision signals in and waits
// until gate is closed.
type recordingStore struct {
	bucket.Store
	mu    sync.Mutex
	calls []storeCall
	in    chan struct{}
	gate  chan struct{}
}

// hold makes later decisions signal in and wait for gate.
func (s *recordingStore) hold(in, gate chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in, s.gate = in, gate
}

func (s *recordingStore) Decide(ctx context.Context, req *bucket.Request, res *bucket.Result) error {
	c := storeCall{Now: req.Now, Cost: req.Cost, Subjects: append([]bucket.RequestSubject(nil), req.Subjects...),
		Locks: append([]string(nil), req.Locks...), TrustKeys: append([]string(nil), req.TrustKeys...), Device: req.Device, OwnTrust: req.OwnTrust}
	for _, l := range req.Limits {
		c.Limits = append(c.Limits, fmt.Sprintf("%s|%s|%v|%v|%v|%b|%d", l.Key, l.OwnKey, l.Burst, l.Rate, l.Period, l.Subjects, l.Kind))
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	in, gate := s.in, s.gate
	s.mu.Unlock()
	if gate != nil {
		in <- struct{}{}
		<-gate
	}
	return s.Store.Decide(ctx, req, res)
}

func newRecordingStore() *recordingStore {
	return &recordingStore{Store: bucket.NewMemoryStore(bucket.MemoryOptions{Now: func() time.Time { return t0 }})}
}

// benchPeersPolicy is testdata/bench-policy.yaml, the policy
// scripts/bench-peers runs on both paths (four limits on every decision,
// the route's from local shares).
func benchPeersPolicy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../testdata/bench-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// benchRequest is what scripts/benchgrpc sends for key i: four
// descriptors, as Envoy sends them.
func benchRequest(i int) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("remote_address", fmt.Sprintf("10.0.0.%d", i)), desc("method", "POST", "path", "/bench"),
		desc("user_id", fmt.Sprintf("u_%d", i)), desc("device_id", fmt.Sprintf("d_%d", i))}}
}

// TestRLSCallIsOneStoreDecision: a ShouldRateLimit call with four
// descriptors is one store decision, naming exactly the keys, subjects
// and numbers of the equivalent POST /v1/check (scripts/bench-peers' two
// paths ask Redis for the same work), however often it repeats.
func TestRLSCallIsOneStoreDecision(t *testing.T) {
	t.Parallel()
	// without the route's local share: when a share starts serving a key
	// depends on timing, and the paths are compared call by call
	src := strings.Replace(benchPeersPolicy(t), ", local_share: 5ms}", "}", 1)
	viaRLS, viaHTTP := newRecordingStore(), newRecordingStore()
	g, h := newEnvPolicy(t, viaRLS, src), newEnvPolicy(t, viaHTTP, src)
	for i := 1; i <= 3; i++ {
		if resp := call(t, g, benchRequest(i)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("rls %d: %v", i, resp)
		}
		body := fmt.Sprintf(`{"endpoint":"POST /bench","ip":"10.0.0.%d","user_id":"u_%d","device_id":"d_%d","cost":1}`, i, i, i)
		w := httptest.NewRecorder()
		h.api.ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)))
		if w.Code != http.StatusOK {
			t.Fatalf("check %d: %d %s", i, w.Code, w.Body)
		}
	}
	// one store decision per call
	viaRLS.mu.Lock()
	defer viaRLS.mu.Unlock()
	viaHTTP.mu.Lock()
	defer viaHTTP.mu.Unlock()
	if len(viaRLS.calls) != 3 || len(viaHTTP.calls) != 3 {
		t.Fatalf("%d store decisions for 3 RLS calls, %d for 3 checks", len(viaRLS.calls), len(viaHTTP.calls))
	}
	if !reflect.DeepEqual(viaRLS.calls, viaHTTP.calls) {
		t.Fatalf("RLS store decisions:\n%+v\ncheck store decisions:\n%+v", viaRLS.calls, viaHTTP.calls)
	}
	last := viaRLS.calls[len(viaRLS.calls)-1]
	if len(last.Limits) != 4 || len(last.Subjects) != 4 {
		t.Fatalf("a decision names %d buckets and %d subjects, want 4 (ip, user, device, route) and 4 (ip, user, device, claim): %+v",
			len(last.Limits), len(last.Subjects), last)
	}
}

// TestRLSConcurrentCallsReachStoreTogether: calls in flight on one gRPC
// connection reach the store at once (none waits for another's
// decision), so the Redis store can batch them as it batches concurrent
// checks.
func TestRLSConcurrentCallsReachStoreTogether(t *testing.T) {
	t.Parallel()
	const n = 32
	st := newRecordingStore()
	e := newEnvPolicy(t, st, benchPeersPolicy(t))
	call(t, e, benchRequest(0)) // the route's first share, before the gate
	in, gate := make(chan struct{}, n), make(chan struct{})
	st.hold(in, gate)
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		go func() {
			_, err := e.client.ShouldRateLimit(context.Background(), benchRequest(i))
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		<-in // every call is inside the store before any is answered
	}
	close(gate)
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
