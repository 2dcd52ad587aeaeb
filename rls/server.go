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
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/render"
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
	in       atomic.Pointer[internTable]
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
		Help: "Envoy rate-limit service calls by result: ok, over_limit, unknown_domain (answered OK, no limit), invalid (descriptors that cannot be mapped: OVER_LIMIT with a 400 envelope), error.",
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

// Register adds the service to a gRPC server. Its messages are pooled;
// with grpc.ForceServerCodecV2(s.Codec()) the request is decoded by the
// fast decoder and the response given back to the pool after
// marshalling; with another codec the service works the same, allocating.
func (s *Server) Register(g *grpc.Server) { g.RegisterService(&serviceDesc, s) }

// serviceDesc is the generated rlsv3.RateLimitService_ServiceDesc with a
// handler that decodes into a pooled request and answers a pooled
// response, which the codec gives back after marshalling.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: rlsv3.RateLimitService_ServiceDesc.HandlerType,
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    rlsv3.RateLimitService_ServiceDesc.Metadata,
}

// FullMethod is the full path of the service's one method.
const FullMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	p := getRequest()
	defer putRequest(p)
	if err := dec(p); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return s.answer(ctx, &p.msg)
	}
	return interceptor(ctx, &p.msg, &grpc.UnaryServerInfo{Server: srv, FullMethod: FullMethod}, func(ctx context.Context, req any) (any, error) {
		return s.answer(ctx, req.(*rlsv3.RateLimitRequest))
	})
}

// answer is shouldRateLimit with a nil *pooledResponse turned into a nil
// interface (gRPC marshals what a handler returns unless the error is set).
func (s *Server) answer(ctx context.Context, req *rlsv3.RateLimitRequest) (any, error) {
	p, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		return nil, err
	}
	return p, nil
}

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

// ShouldRateLimit decides on the one request req describes. (The gRPC
// server calls shouldRateLimit through serviceDesc, with pooled
// messages; this is the generated interface's method.)
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	p, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		return nil, err
	}
	return &p.msg, nil // not given back to the pool: the caller keeps it
}

// shouldRateLimit decides on req and returns the answer in a pooled
// response (putResponse gives it back).
func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*pooledResponse, error) {
	e := s.o.Policy().Envoy
	if e == nil || req.GetDomain() != e.Domain {
		s.byResult[2].Inc()
		s.warn("rls: a request for a domain this policy does not answer: OK with no limit (further ones within 10s not logged)",
			"domain", clip(req.GetDomain()), "policy_domain", domainOf(e))
		p := getResponse()
		p.okNoLimit(len(req.GetDescriptors()))
		return p, nil
	}
	in := inputPool.Get().(*engine.Input)
	defer inputPool.Put(in)
	rid := ulid.Make().String()
	if err := Map(e, req, in); err != nil {
		// Descriptor values are mostly the client's headers (x-device-id,
		// :path, an account header). A gRPC error would let Envoy apply
		// failure_mode_deny, which the documented configuration sets to
		// false: any client could escape every limit with one bad header.
		// So the request is denied, as the check API refuses it (400).
		s.byResult[3].Inc()
		s.warn("rls: invalid request: OVER_LIMIT with a 400 envelope (further warnings within 10s not logged)",
			"domain", e.Domain, "request_id", rid, "err", err.Error())
		p := getResponse()
		p.badRequest(len(req.Descriptors), rid, requestMessage(err))
		return p, nil
	}
	d := engine.GetDecision()
	defer engine.PutDecision(d)
	if err := s.o.Decider.Decide(ctx, rid, in, d); err != nil {
		s.byResult[4].Inc()
		s.o.Logger.Error("rls: decide", "request_id", rid, "err", err)
		return nil, status.Error(codes.Internal, "rls: internal error")
	}
	p := getResponse()
	p.build(len(req.Descriptors), rid, d)
	if p.msg.OverallCode == rlsv3.RateLimitResponse_OK {
		s.byResult[0].Inc()
	} else {
		s.byResult[1].Inc()
	}
	return p, nil
}

func domainOf(e *policy.Envoy) string {
	if e == nil {
		return ""
	}
	return e.Domain
}

// pooledResponse is a RateLimitResponse with the storage of its parts,
// reused across calls: the codec gives it back once it is marshalled.
type pooledResponse struct {
	msg      rlsv3.RateLimitResponse
	st       rlsv3.RateLimitResponse_DescriptorStatus
	limit    rlsv3.RateLimitResponse_RateLimit
	reset    durationpb.Duration
	statuses []*rlsv3.RateLimitResponse_DescriptorStatus
	hv       []corev3.HeaderValue
	hvp      []*corev3.HeaderValue
	h        http.Header
	keys     []string
}

// ProtoReflect makes p a proto.Message (its RateLimitResponse), so that
// any gRPC codec can marshal it.
func (p *pooledResponse) ProtoReflect() protoreflect.Message { return p.msg.ProtoReflect() }

var respPool = sync.Pool{New: func() any { return &pooledResponse{h: make(http.Header, 8)} }}

func getResponse() *pooledResponse { return respPool.Get().(*pooledResponse) }

func putResponse(p *pooledResponse) {
	if cap(p.statuses) > maxPooled {
		return
	}
	p.msg.RawBody = nil // the envelope is the caller's allocation; do not keep it
	respPool.Put(p)
}

// Response renders decision d for n descriptors: the check API's headers
// in response_headers_to_add (lower-case names), and on a denial
// OVER_LIMIT with the envelope in raw_body, its Content-Type, X-Request-Id
// and the HTTP status /v1/check would have answered in X-Tollgate-Status
// (Envoy answers every OVER_LIMIT with its own rate_limited_status, 429
// by default). Every descriptor's status carries the binding limit.
func Response(n int, rid string, d *engine.Decision) *rlsv3.RateLimitResponse {
	p := &pooledResponse{h: make(http.Header, 8)}
	p.build(n, rid, d)
	return &p.msg
}

// build is Response into p's storage.
func (p *pooledResponse) build(n int, rid string, d *engine.Decision) {
	clear(p.h)
	code, body := render.Decision(p.h, rid, d)
	p.msg.Reset()
	p.msg.OverallCode = rlsv3.RateLimitResponse_OK
	if code != http.StatusOK {
		p.msg.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		p.msg.RawBody = body
		p.h[render.HeaderTollgateStatus] = []string{strconv.Itoa(code)}
		p.h["X-Request-Id"] = []string{rid}
	}
	delete(p.h, "Content-Length") // Envoy sets its own
	p.headers()
	p.status(p.msg.OverallCode, d)
	p.fill(n, &p.st)
}

// codeBadRequest is the envelope's code of a refused request (api.CodeBadRequest).
const codeBadRequest = "BAD_REQUEST"

// requestMessage is the envelope's message for a Map error: a
// *RequestError's own message, without the package prefix.
func requestMessage(err error) string {
	var re *RequestError
	if errors.As(err, &re) {
		return re.Msg
	}
	return err.Error()
}

// badRequest is the answer to a request that cannot be decided on: the
// denial Envoy enforces (OVER_LIMIT), with the check API's 400 envelope
// (code BAD_REQUEST, msg naming the entry) in raw_body, its Content-Type,
// X-Request-Id and X-Tollgate-Status: 400; every descriptor's status is
// OVER_LIMIT with no limit. No limit was consulted: it takes no tokens.
func (p *pooledResponse) badRequest(n int, rid, msg string) {
	clear(p.h)
	c := &render.Capture{H: p.h}
	render.WriteError(c, rid, http.StatusBadRequest, codeBadRequest, msg, "")
	p.msg.Reset()
	p.msg.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	p.msg.RawBody = c.Body
	p.h[render.HeaderTollgateStatus] = []string{strconv.Itoa(http.StatusBadRequest)}
	p.h["X-Request-Id"] = []string{rid}
	delete(p.h, "Content-Length") // Envoy sets its own
	p.headers()
	p.st.Reset()
	p.st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	p.fill(n, &p.st)
}

// okNoLimit is the answer to a request no limit applies to.
func (p *pooledResponse) okNoLimit(n int) {
	p.msg.Reset()
	p.msg.OverallCode = rlsv3.RateLimitResponse_OK
	p.st.Reset()
	p.st.Code = rlsv3.RateLimitResponse_OK
	p.fill(n, &p.st)
}

// fill points n statuses at st.
func (p *pooledResponse) fill(n int, st *rlsv3.RateLimitResponse_DescriptorStatus) {
	p.statuses = p.statuses[:0]
	for i := 0; i < n; i++ {
		p.statuses = append(p.statuses, st)
	}
	p.msg.Statuses = p.statuses
}

// status sets p.st: the status every descriptor of d's request gets.
func (p *pooledResponse) status(code rlsv3.RateLimitResponse_Code, d *engine.Decision) {
	st := &p.st
	st.Reset()
	st.Code = code
	switch {
	case d.Outcome == engine.Locked || d.Outcome == engine.StepUp:
		st.DurationUntilReset = p.duration(d.RetryAfter)
	case d.Binding != nil:
		p.limit.Reset()
		p.limit.Name, p.limit.RequestsPerUnit, p.limit.Unit = d.Binding.Name, clampU32(d.Limit), unitOf(d.Window)
		st.CurrentLimit = &p.limit
		st.LimitRemaining = clampU32(d.Remaining)
		st.DurationUntilReset = p.duration(d.Reset.Sub(d.Now))
	}
}

// duration sets p.reset to max(t, 0) (as durationpb.New would) and returns it.
func (p *pooledResponse) duration(t time.Duration) *durationpb.Duration {
	t = max(t, 0)
	p.reset.Reset()
	p.reset.Seconds, p.reset.Nanos = int64(t/time.Second), int32(t%time.Second)
	return &p.reset
}

// unitOf maps a rate's period (1s, 1m, 1h or 24h in a policy) or a quota's
// (a day, a week, a month of 28 to 31 days) to Envoy's unit.
func unitOf(p time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch {
	case p >= 28*24*time.Hour: // a month quota's period: 28 to 31 days
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case p >= 7*24*time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case p >= 24*time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_DAY
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

// headers sets response_headers_to_add from p.h, sorted by name, with
// lower-case names (HTTP/2's spelling, and Envoy's).
func (p *pooledResponse) headers() {
	p.keys = p.keys[:0]
	for k := range p.h {
		p.keys = append(p.keys, k)
	}
	sort.Strings(p.keys)
	p.hv, p.hvp = p.hv[:0], p.hvp[:0]
	for _, k := range p.keys {
		lk := lowerNames[k]
		if lk == "" {
			lk = strings.ToLower(k)
		}
		for _, v := range p.h[k] {
			p.hv = append(p.hv, corev3.HeaderValue{Key: lk, Value: v})
		}
	}
	for i := range p.hv {
		p.hvp = append(p.hvp, &p.hv[i])
	}
	p.msg.ResponseHeadersToAdd = p.hvp
}

// lowerNames spares a strings.ToLower per header of every answer: the
// names as the check path sets them (api's constants, not always in
// canonical form) and canonically.
var lowerNames = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{render.HeaderLimit, render.HeaderRemaining, render.HeaderReset, render.HeaderDegraded,
		render.HeaderPolicy, render.HeaderRateLimit, "Retry-After", "Content-Type", "X-Request-Id", render.HeaderTollgateStatus} {
		m[k] = strings.ToLower(k)
		m[http.CanonicalHeaderKey(k)] = strings.ToLower(k)
	}
	return m
}()
