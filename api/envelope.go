package api

import (
	"net/http"
	"strconv"

	"github.com/tollgate-dev/tollgate/internal/jsonw"
)

// Error codes of the envelope.
const (
	CodeRateLimited        = "RATE_LIMITED"
	CodeAccountLocked      = "ACCOUNT_LOCKED"
	CodeStepUpRequired     = "STEP_UP_REQUIRED"
	CodeDenied             = "DENIED"
	CodeLimiterUnavailable = "LIMITER_UNAVAILABLE"
	CodeBadRequest         = "BAD_REQUEST"
	CodePayloadTooLarge    = "PAYLOAD_TOO_LARGE"
	CodeUnauthorized       = "UNAUTHORIZED"
	CodeNotFound           = "NOT_FOUND"
	CodeMethodNotAllowed   = "METHOD_NOT_ALLOWED"
	CodeInternal           = "INTERNAL"
	CodeTooManyAttempts    = "TOO_MANY_ATTEMPTS"
	CodeRequestTimeout     = "REQUEST_TIMEOUT"
)

// apiError is an error that carries its status and envelope; one place,
// writeError, turns it into a response.
type apiError struct {
	status  int
	code    string
	message string
	// details is a pre-rendered JSON object body (without braces), or "".
	details string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeBadRequest, message: msg}
}

// WriteError writes an error envelope with status, code and message;
// details is a rendered JSON object body without its braces ("" for
// none), e.g. `"retry_after_ms":1000`.
func WriteError(w http.ResponseWriter, requestID string, status int, code, message, details string) {
	writeError(w, requestID, &apiError{status: status, code: code, message: message, details: details})
}

// AppendJSONString appends s to b as a JSON string.
func AppendJSONString(b []byte, s string) []byte { return jsonw.AppendString(b, s) }

// writeError writes the envelope
// {"error": {"code", "message", "details", "request_id"}}.
func writeError(w http.ResponseWriter, rid string, e *apiError) {
	b := make([]byte, 0, 256)
	b = append(b, `{"error":{"code":`...)
	b = jsonw.AppendString(b, e.code)
	b = append(b, `,"message":`...)
	b = jsonw.AppendString(b, e.message)
	b = append(b, `,"details":{`...)
	b = append(b, e.details...)
	b = append(b, `},"request_id":`...)
	b = jsonw.AppendString(b, rid)
	b = append(b, "}}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}
