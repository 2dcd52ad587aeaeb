package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/jsonw"
	"github.com/tollgate-dev/tollgate/internal/render"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// checkState is the per-request scratch of handleCheck, pooled.
type checkState struct {
	body []byte
	in   engine.Input
	d    engine.Decision
	out  []byte
}

var checkPool = sync.Pool{New: func() any { return &checkState{body: make([]byte, 0, 1024), out: make([]byte, 0, 512)} }}

// handleCheck serves POST /v1/check.
func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	rid := requestID(w, r)
	st := checkPool.Get().(*checkState)
	defer checkPool.Put(st)

	body, aerr := readBody(r, st.body[:0])
	st.body = body[:0]
	if aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	if aerr := decodeCheck(body, &st.in); aerr != nil {
		writeError(w, rid, aerr)
		return
	}
	st.in.DeviceVerified = s.deviceVerified(st.in.DeviceToken, st.in.DeviceID)
	if err := s.Decide(r.Context(), rid, &st.in, &st.d); err != nil {
		s.o.Logger.Error("check: decide", "request_id", rid, "err", err)
		writeError(w, rid, &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"})
		return
	}
	st.out = s.respond(w, rid, &st.d, st.out[:0])
}

// Decide is the check path after decoding: it decides on in (policy,
// signals, multipliers, lockouts, failure modes) and publishes the
// decision event. /v1/check, /v1/forward-auth and the Envoy rate-limit
// service all decide through it, so a request is judged alike whichever
// way it arrives. rid names the request in events and logs. It is safe
// for concurrent use; d may be reused.
func (s *Server) Decide(ctx context.Context, rid string, in *engine.Input, d *engine.Decision) error {
	if err := s.o.Engine.Decide(ctx, in, d); err != nil {
		return err
	}
	if s.o.Events != nil {
		s.publish(rid, in, d)
	}
	return nil
}

// routeOf is the decision's `route` key part value.
func routeOf(d *engine.Decision) string {
	if d.Route == "" {
		return policy.DefaultClass
	}
	return d.Route
}

// publish hands the decision to the event sink (never blocks).
func (s *Server) publish(rid string, in *engine.Input, d *engine.Decision) {
	var ev streams.Decision
	DecisionEvent(&ev, rid, in, d)
	s.o.Events.Decision(&ev)
}

// DecisionEvent fills ev with the event of decision d on request in, as
// the limiter publishes it (`limiter replay` builds the same events for
// the risk engine from the decisions it re-runs).
func DecisionEvent(ev *streams.Decision, rid string, in *engine.Input, d *engine.Decision) {
	*ev = streams.Decision{
		TS: d.Now.UTC(), RequestID: rid, Endpoint: in.Endpoint, Class: d.Class, Route: routeOf(d),
		Allowed: d.Outcome == engine.Allowed || d.Outcome == engine.Degraded, Result: d.Outcome.String(),
		Remaining: d.Remaining, IP: in.IP, ASN: in.ASN, UserID: in.UserID, DeviceID: in.DeviceID, Account: in.Account,
		Cost: in.Cost, Attributes: in.Attributes, DeviceVerified: in.DeviceVerified, LeaseID: d.LeaseID(),
		AttestationBudget: in.AttestationBudget,
	}
	switch {
	case d.Outcome == engine.AllowedList:
		ev.Allowed, ev.Limit = true, d.List.Name
	case d.Outcome == engine.DeniedList:
		ev.Limit = d.List.Name
	case d.Outcome == engine.Locked || d.Outcome == engine.StepUp:
		ev.Limit = d.Lock.Rule
	case d.Binding != nil:
		ev.Limit, ev.Kind = d.Binding.Name, d.Binding.Kind.String()
	}
}

// readBody reads at most MaxBody bytes of the request body into buf.
func readBody(r *http.Request, buf []byte) ([]byte, *apiError) {
	if r.ContentLength > MaxBody {
		return buf, &apiError{status: http.StatusRequestEntityTooLarge, code: CodePayloadTooLarge, message: "body is larger than 64 KiB"}
	}
	rd := http.MaxBytesReader(nil, r.Body, MaxBody)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return buf, &apiError{status: http.StatusRequestEntityTooLarge, code: CodePayloadTooLarge, message: "body is larger than 64 KiB"}
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return buf, bodyError(err) // 408: it did not arrive in time
			}
			return buf, badRequest("body: " + err.Error())
		}
	}
}

// respond writes the decision d: headers and body per the contract. An
// allowed answer's headers are WriteDecision's, their values cut from one
// string (see setAllowedHeaders); a denial is WriteDecision's.
func (s *Server) respond(w http.ResponseWriter, rid string, d *engine.Decision, b []byte) []byte {
	if !proceeds(d.Outcome) {
		WriteDecision(w, rid, d)
		return b
	}
	b = append(b, `{"allowed":true`...)
	if d.Binding != nil {
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, `,"reset":`...)
		b = strconv.AppendInt(b, render.CeilUnix(d.Reset), 10)
		b = append(b, `,"policy":`...)
		b = jsonw.AppendString(b, d.Binding.Name)
	}
	if id := d.LeaseID(); id != "" {
		b = append(b, `,"lease_id":`...)
		b = jsonw.AppendString(b, id)
	}
	b = append(b, `,"request_id":`...)
	b = jsonw.AppendString(b, rid)
	b = append(b, "}\n"...)
	n := len(b)
	b = setAllowedHeaders(w.Header(), d, n, b)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b[:n])
	return b
}

// proceeds reports whether a request decided o may proceed (allowed or
// degraded): WriteDecision writes no answer for it.
func proceeds(o engine.Outcome) bool {
	return o == engine.Allowed || o == engine.Degraded || o == engine.AllowedList
}

// jsonType is the Content-Type of the check API's answers (net/http copies
// header values when the answer is written; nothing changes this slice).
var jsonType = []string{"application/json"}

// setAllowedHeaders sets what WriteDecision sets for a request that may
// proceed (X-RateLimit-Degraded, X-RateLimit-* and the RateLimit fields),
// Content-Type and Content-Length (n), with every value appended to
// scratch after its first len(scratch) bytes and cut from one string: two
// allocations for them all instead of two per header. It returns scratch.
func setAllowedHeaders(h http.Header, d *engine.Decision, n int, scratch []byte) []byte {
	if d.Outcome == engine.Degraded {
		h[HeaderDegraded] = []string{"1"}
	}
	b := scratch
	from := len(b)
	var ends [6]int
	k := 0
	cut := func() { ends[k] = len(b); k++ }
	if d.Binding != nil {
		t := d.Reset.Sub(d.Now)
		if t < 0 {
			t = 0
		}
		win := int64(d.Window / time.Second)
		if win < 1 {
			win = 1
		}
		b = strconv.AppendInt(b, d.Limit, 10)
		cut()
		b = strconv.AppendInt(b, d.Remaining, 10)
		cut()
		b = strconv.AppendInt(b, render.CeilUnix(d.Reset), 10)
		cut()
		b = render.AppendSFString(b, d.Binding.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, win, 10)
		cut()
		b = render.AppendSFString(b, d.Binding.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, int64((t+time.Second-1)/time.Second), 10)
		cut()
	}
	b = strconv.AppendInt(b, int64(n), 10)
	cut()
	all := string(b[from:])
	vs := make([]string, k)
	at := from
	for i := range vs {
		vs[i] = all[at-from : ends[i]-from]
		at = ends[i]
	}
	if d.Binding != nil {
		h[HeaderLimit] = vs[0:1:1]
		h[HeaderRemaining] = vs[1:2:2]
		h[HeaderReset] = vs[2:3:3]
		h[HeaderPolicy] = vs[3:4:4]
		h[HeaderRateLimit] = vs[4:5:5]
	}
	h["Content-Type"] = jsonType
	h["Content-Length"] = vs[k-1 : k : k]
	return b
}

// WriteDecision applies d to a response (render.WriteDecision). When the
// request may proceed (allowed or degraded) it sets the rate-limit
// headers (and X-RateLimit-Degraded) and returns true without writing a
// status or body; otherwise it writes the complete denial (429, 403 or
// 503 with the envelope and headers) and returns false. The reverse proxy
// and the middleware package use it so every denial looks the same.
func WriteDecision(w http.ResponseWriter, rid string, d *engine.Decision) bool {
	return render.WriteDecision(w, rid, d)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
