package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/api"
)

// releaseTimeout bounds the release of a request's concurrency slots
// after the wrapped handler returned (its context may be gone by then).
const releaseTimeout = 5 * time.Second

// leaseOf returns the lease_id of a 200 check answer ("" when none).
func leaseOf(answer []byte) string {
	if !bytes.Contains(answer, []byte(`"lease_id"`)) {
		return ""
	}
	var a struct {
		LeaseID string `json:"lease_id"`
	}
	if json.Unmarshal(answer, &a) != nil {
		return ""
	}
	return a.LeaseID
}

// releaseDirect frees a lease through the in-process engine. A failure is
// logged; the lease then expires after its lease_ttl.
func (l *limiter) releaseDirect(rid, lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := l.eng.Release(ctx, lease); err != nil {
		l.log.LogAttrs(ctx, slog.LevelWarn, "release", slog.String("request_id", rid), slog.String("err", err.Error()))
	}
}

// releaseRemote frees a lease with POST /v1/release on the limiter that
// answered the check. A failure is logged (throttled like the checks');
// the lease then expires after its lease_ttl.
func (l *limiter) releaseRemote(rid, lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, releaseTimeout))
	defer cancel()
	body := api.AppendJSONString([]byte(`{"lease_id":`), lease)
	body = append(body, '}')
	url := strings.TrimSuffix(l.checkURL, "/v1/check") + "/v1/release"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err == nil {
		req.Header["Content-Type"] = []string{"application/json"}
		req.Header["X-Request-Id"] = []string{rid}
		if l.auth != nil {
			req.Header["Authorization"] = l.auth
		}
		var resp *http.Response
		if resp, err = l.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
				err = &statusError{resp.StatusCode}
			}
		}
	}
	if err != nil {
		if n, ok := l.throttle.allow(l.now()); ok {
			l.log.LogAttrs(ctx, slog.LevelWarn, "release", slog.String("request_id", rid), slog.String("err", err.Error()), slog.Int64("suppressed", n))
		}
	}
}

// statusError is a release answered with an unexpected status.
type statusError struct{ status int }

func (e *statusError) Error() string {
	return "middleware: release answered " + http.StatusText(e.status)
}
