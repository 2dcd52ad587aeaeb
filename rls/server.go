package rls

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/policy"
)

// Decider is the check path the service decides through (api.Server).
type Decider interface {
	Decide(ctx context.Context, rid string, in *engine.Input, d *engine.Decision) error
}

// Options configures a Server.
type Options struct {
	// Decider decides (required): the api.Server, so that a gRPC request
	// is judged exactly as a /v1/check request.
	Decider Decider
	// Policy returns the policy in force (required); its envoy section
	// maps descriptors, read once per request.
	Policy func() *policy.Policy
	// Logger receives unknown domains, bad requests and errors (default: discard).
	Logger *slog.Logger
	// Registerer receives the service's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Now is the clock of log throttling (default time.Now).
	Now func() time.Time
}

// Results of tollgate_rls_requests_total.
const (
	ResultOK            = "ok"
	ResultOverLimit     = "over_limit"
	ResultUnknownDomain = "unknown_domain"
	ResultInvalid       = "invalid"
	ResultError         = "error"
)

// Server serves envoy.service.ratelimit.v3.RateLimitService. It is safe
// for concurrent use; use New.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	o        Options
	requests *prometheus.CounterVec
	byResult [5]prometheus.Counter
	lastWarn atomic.Int64 // unix nanos of the last throttled warning
}

// New returns a Server, validating o.
func New(o Options) (*Server, error) {
	if o.Decider == nil || o.Policy == nil {
		return nil, errors.New("rls: decider and policy are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{o: o}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_rls_requests_total",
		Help: "Envoy rate-limit service calls by result: ok, over_limit, unknown_domain (answered OK, no limit), invalid (INVALID_ARGUMENT), error.",
	}, []string{"result"})
	for i, r := range []string{ResultOK, ResultOverLimit, ResultUnknownDomain, ResultInvalid, ResultError} {
		s.byResult[i] = s.requests.WithLabelValues(r)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(s.requests); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// warn logs at most one warning per 10 s per server (a flood of unknown
// domains must not flood the log; the counter has them all).
func (s *Server) warn(msg string, args ...any) {
	now := s.o.Now().UnixNano()
	last := s.lastWarn.Load()
	if now-last < int64(10*time.Second) || !s.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.o.Logger.Warn(msg, args...)
}

var inputPool = sync.Pool{New: func() any { return new(engine.Input) }}

// ShouldRateLimit decides on the one request req describes.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	e := s.o.Policy().Envoy
	if e == nil || req.GetDomain() != e.Domain {
		s.byResult[2].Inc()
		s.warn("rls: a request for a domain this policy does not answer: OK with no limit (further ones within 10s not logged)",
			"domain", clip(req.GetDomain()), "policy_domain", domainOf(e))
		return okNoLimit(len(req.GetDescriptors())), nil
	}
	in := inputPool.Get().(*engine.Input)
	defer inputPool.Put(in)
	if err := Map(e, req, in); err != nil {
		s.byResult[3].Inc()
		s.warn("rls: invalid request", "domain", e.Domain, "err", err.Error())
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	rid := ulid.Make().String()
	d := engine.GetDecision()
	defer engine.PutDecision(d)
	if err := s.o.Decider.Decide(ctx, rid, in, d); err != nil {
		s.byResult[4].Inc()
		s.o.Logger.Error("rls: decide", "request_id", rid, "err", err)
		return nil, status.Error(codes.Internal, "rls: internal error")
	}
	resp := Response(len(req.Descriptors), rid, d)
	if resp.OverallCode == rlsv3.RateLimitResponse_OK {
		s.byResult[0].Inc()
	} else {
		s.byResult[1].Inc()
	}
	return resp, nil
}

func domainOf(e *policy.Envoy) string {
	if e == nil {
		return ""
	}
	return e.Domain
}

// okNoLimit is the answer to a request no limit applies to.
func okNoLimit(n int) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return resp
}

// Response renders decision d for n descriptors: the check API's headers
// in response_headers_to_add (lower-case names), and on a denial
// OVER_LIMIT with the envelope in raw_body, its Content-Type, X-Request-Id
// and the HTTP status /v1/check would have answered in X-Tollgate-Status
// (Envoy answers every OVER_LIMIT with its own rate_limited_status, 429
// by default). Every descriptor's status carries the binding limit.
func Response(n int, rid string, d *engine.Decision) *rlsv3.RateLimitResponse {
	h := make(http.Header, 8)
	code, body := api.RenderDecision(h, rid, d)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if code != http.StatusOK {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.RawBody = body
		h[api.HeaderTollgateStatus] = []string{strconv.Itoa(code)}
		h["X-Request-Id"] = []string{rid}
	}
	delete(h, "Content-Length") // Envoy sets its own
	resp.ResponseHeadersToAdd = headerValues(h)
	st := descriptorStatus(resp.OverallCode, d)
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range resp.Statuses {
		resp.Statuses[i] = st
	}
	return resp
}

// descriptorStatus is the status every descriptor of d's request gets.
func descriptorStatus(code rlsv3.RateLimitResponse_Code, d *engine.Decision) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: code}
	switch {
	case d.Outcome == engine.Locked || d.Outcome == engine.StepUp:
		st.DurationUntilReset = durationpb.New(max(d.RetryAfter, 0))
	case d.Binding != nil:
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: d.Binding.Name, RequestsPerUnit: clampU32(d.Limit), Unit: unitOf(d.Window)}
		st.LimitRemaining = clampU32(d.Remaining)
		st.DurationUntilReset = durationpb.New(max(d.Reset.Sub(d.Now), 0))
	}
	return st
}

// unitOf maps a rate's period (1s, 1m or 1h in a policy) to Envoy's unit.
func unitOf(p time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch {
	case p >= time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case p >= time.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	}
	return rlsv3.RateLimitResponse_RateLimit_SECOND
}

func clampU32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(v)
}

// headerValues turns h into Envoy header values, sorted by name, with
// lower-case names (HTTP/2's spelling, and Envoy's).
func headerValues(h http.Header) []*corev3.HeaderValue {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*corev3.HeaderValue, 0, len(keys))
	for _, k := range keys {
		lk := lowerNames[k]
		if lk == "" {
			lk = strings.ToLower(k)
		}
		for _, v := range h[k] {
			out = append(out, &corev3.HeaderValue{Key: lk, Value: v})
		}
	}
	return out
}

// lowerNames spares a strings.ToLower per header of every answer.
var lowerNames = map[string]string{
	"X-Ratelimit-Limit": "x-ratelimit-limit", "X-Ratelimit-Remaining": "x-ratelimit-remaining",
	"X-Ratelimit-Reset": "x-ratelimit-reset", "X-Ratelimit-Degraded": "x-ratelimit-degraded",
	"Ratelimit-Policy": "ratelimit-policy", "Ratelimit": "ratelimit", "Retry-After": "retry-after",
	"Content-Type": "content-type", "X-Request-Id": "x-request-id", api.HeaderTollgateStatus: "x-tollgate-status",
}
