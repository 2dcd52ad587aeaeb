package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// recorder is the ResponseWriter of an in-process admin API call.
type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.h }
func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// apiError is an admin API answer other than 2xx: its envelope's message.
type apiError struct {
	status  int
	message string
}

func (e *apiError) Error() string { return e.message }

// call makes an admin API request in process: method and path (with its
// query), body JSON-encoded unless nil, the admin token, and r's client
// address and request id, so the audit record names the operator's
// address. A 2xx answer is decoded into out (unless nil); any other
// answer is an *apiError with the envelope's message.
func (c *Console) call(r *http.Request, method, path string, body, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("console: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, rd)
	if err != nil {
		return fmt.Errorf("console: %s %s: %w", method, path, err)
	}
	req.RemoteAddr, req.Host = r.RemoteAddr, r.Host
	req.Header.Set("Authorization", "Bearer "+c.o.AdminToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		req.Header["X-Forwarded-For"] = xff // the throttle and audit identify the client as for the API
	}
	w := &recorder{h: http.Header{}}
	c.o.API.ServeHTTP(w, req)
	if w.code < 200 || w.code > 299 {
		var env struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := http.StatusText(w.code)
		if json.Unmarshal(w.body.Bytes(), &env) == nil && env.Error.Message != "" {
			msg = env.Error.Message
		}
		return &apiError{status: w.code, message: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(w.body.Bytes(), out); err != nil {
		return fmt.Errorf("console: decode %s %s: %w", method, path, err)
	}
	return nil
}

// subjectPath is /{subject}/{id} with the id escaped (pathSegment).
func subjectPath(subject, id string) string {
	return "/" + pathSegment(subject) + "/" + pathSegment(id)
}

// pathSegment is s escaped as one segment of an admin API path. The ids
// "." and ".." (a client picks its device id and account name) are
// spelled %2E and %2E%2E: as dot segments the API's router would clean
// them away and answer a redirect, and the subject could not be read,
// blocked or lifted from the console.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
