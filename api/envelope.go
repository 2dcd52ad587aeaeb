package api

import (
	"net/http"

	"github.com/tollgate-dev/tollgate/internal/jsonw"
	"github.com/tollgate-dev/tollgate/internal/render"
)

// Error codes of the envelope.
const (
	CodeRateLimited        = render.CodeRateLimited
	CodeAccountLocked      = render.CodeAccountLocked
	CodeStepUpRequired     = render.CodeStepUpRequired
	CodeDenied             = render.CodeDenied
	CodeLimiterUnavailable = render.CodeLimiterUnavailable
	CodeBadRequest         = "BAD_REQUEST"
	CodePayloadTooLarge    = "PAYLOAD_TOO_LARGE"
	CodeUnauthorized       = "UNAUTHORIZED"
	CodeNotFound           = "NOT_FOUND"
	CodeMethodNotAllowed   = "METHOD_NOT_ALLOWED"
	CodeInternal           = "INTERNAL"
	CodeTooManyAttempts    = "TOO_MANY_ATTEMPTS"
	CodeRequestTimeout     = "REQUEST_TIMEOUT"
	CodeUnsupportedMedia   = "UNSUPPORTED_MEDIA_TYPE"
)

// apiError is an error that carries its status and envelope; one place,
// writeError, turns it into a response.
type apiError struct {
	status  int
	code    string
	message string
	// details is a pre-rendered JSON object body (without braces), or "".
	details string
	// reason tags the error for counting (the attestation endpoints: a
	// failed step, or "busy"); never rendered.
	reason string
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

// writeError writes e's envelope (render.WriteError).
func writeError(w http.ResponseWriter, rid string, e *apiError) {
	render.WriteError(w, rid, e.status, e.code, e.message, e.details)
}
