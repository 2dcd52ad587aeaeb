package api

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/jsonw"
	"github.com/tollgate-dev/tollgate/internal/logthrottle"
	"github.com/tollgate-dev/tollgate/policy"
)

// CodeAttestationInvalid is the envelope code of a failed attestation or
// assertion; the message names the failed step.
const CodeAttestationInvalid = "ATTESTATION_INVALID"

// Attestation endpoint paths.
const (
	PathAttestChallenge = "/v1/attest/challenge"
	PathAttestApple     = "/v1/attest/apple"
	PathAttestAndroid   = "/v1/attest/android"
	PathAttestAssertion = "/v1/attest/apple/assertion"
)

// Results of AttestOptions.Count.
const (
	// ResultVerified: an attestation verified and bound a new device id.
	ResultVerified = "verified"
	// ResultRenewed: an attestation or assertion renewed a device id's
	// (the same App Attest key, the id's last device token).
	ResultRenewed = "renewed"
	// ResultFailed: 400 ATTESTATION_INVALID at the step counted.
	ResultFailed = "failed"
	// ResultLimited: a new id the address's budget
	// (risk.attestation.max_per_ip) refused, or could not decide.
	ResultLimited = "limited"
	// ResultBusy: 503, the verifications' queue full (MaxVerifying).
	ResultBusy = "busy"
	// ResultInvalid: another 4xx (a malformed body, a bad field).
	ResultInvalid = "invalid"
	// ResultError: another 5xx (a store down, an internal error).
	ResultError = "error"
)

// Defaults of AttestOptions.
const (
	// DefaultAttestValidFor is AttestOptions.ValidFor when unset.
	DefaultAttestValidFor = 24 * time.Hour
)

// AttestOptions configures the attestation endpoints.
type AttestOptions struct {
	// Apple verifies App Attest; nil answers 404 on the Apple endpoints.
	Apple *attestation.Apple
	// Play verifies Play Integrity; nil answers 404 on the Android endpoint.
	Play *attestation.Play
	// Challenges issues and consumes challenges (default: in-process,
	// attestation.NewMemoryChallenges(0)). Use the Redis one with several replicas.
	Challenges attestation.Challenges
	// Devices remembers attestations and App Attest keys (default:
	// in-process, attestation.NewMemoryDevices(0, Now)).
	Devices attestation.Devices
	// Tokens issues the device token of every successful attestation and
	// assertion (6.3); nil: a random key of this process
	// (attestation.RandomTokens). The engine applies the policy's
	// verified_multiplier to requests presenting a valid token; nothing
	// is written to the bucket store.
	Tokens *attestation.Tokens
	// ValidFor is how long an attestation (and its device token) counts
	// (policy valid_for; default DefaultAttestValidFor). A verified
	// assertion renews it and answers a new token.
	ValidFor time.Duration
	// HoldFor is how long past its end an attestation still binds its
	// device id (policy trusted_for; default policy.DefaultTrustedFor): a
	// device trusted by an account on a login with a valid token stays
	// trusted up to trusted_for after the token's end, so for that long
	// only the same App Attest key or the id's last device token may
	// attest the id again (claim).
	HoldFor time.Duration
	// MaxVerifying bounds the attestations verified at once (default:
	// half the CPUs Go uses, at least one); more wait for a slot while
	// their request lasts, and past 64 waiting per slot one is answered
	// 503 LIMITER_UNAVAILABLE at once. Assertions are not bounded (one
	// P-256 signature).
	MaxVerifying int
	// Count, when set, counts each answer of the apple, android and
	// assertion endpoints (not challenges): endpoint "apple", "android"
	// or "assertion"; result ResultVerified, ResultRenewed,
	// ResultFailed (step names the failed step), ResultLimited,
	// ResultBusy, ResultInvalid or ResultError.
	Count func(endpoint, result, step string)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives verification failures and store errors (default: discard).
	Logger *slog.Logger
}

// attestHandler serves the attestation endpoints.
type attestHandler struct {
	o    AttestOptions
	gate *verifyGate
	// failed and busy throttle the lines of failed and saturated
	// attestations to one a second each (Count counts them all): a flood
	// of forged attestations must not become a flood of log.
	failed, busy logthrottle.Throttle
}

// NewAttestHandler returns the handler of POST /v1/attest/challenge,
// /v1/attest/apple, /v1/attest/android and /v1/attest/apple/assertion.
// Mount it at "/v1/attest/" (Server.Handle); it answers other paths under
// it with 404 and other methods with 405, in the envelope. Failed
// verifications are 400 ATTESTATION_INVALID naming the step, malformed
// bodies 400 BAD_REQUEST naming the field, store failures 503
// LIMITER_UNAVAILABLE. Safe for concurrent use.
func NewAttestHandler(o AttestOptions) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Challenges == nil {
		o.Challenges = attestation.NewMemoryChallenges(0)
	}
	if o.Devices == nil {
		o.Devices = attestation.NewMemoryDevices(0, o.Now)
	}
	if o.Tokens == nil {
		o.Tokens = attestation.RandomTokens()
	}
	if o.ValidFor <= 0 {
		o.ValidFor = DefaultAttestValidFor
	}
	if o.HoldFor <= 0 {
		o.HoldFor = policy.DefaultTrustedFor
	}
	return &attestHandler{o: o, gate: newVerifyGate(o.MaxVerifying)}
}

// ServeHTTP implements http.Handler.
func (h *attestHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := requestID(w, r)
	var serve func(http.ResponseWriter, *http.Request, string, *string) *apiError
	endpoint := ""
	switch r.URL.Path {
	case PathAttestChallenge:
		serve = h.challenge
	case PathAttestApple:
		serve, endpoint = h.apple, "apple"
	case PathAttestAndroid:
		serve, endpoint = h.android, "android"
	case PathAttestAssertion:
		serve, endpoint = h.assertion, "assertion"
	default:
		writeError(w, rid, &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "no such endpoint: " + r.Method + " " + clip(r.URL.Path)})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, rid, &apiError{status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed, message: r.Method + " is not allowed here; use POST"})
		return
	}
	result := ""
	aerr := serve(w, r, rid, &result)
	if aerr != nil {
		if aerr.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, rid, aerr)
	}
	if h.o.Count != nil && endpoint != "" {
		result, step := resultOf(result, aerr)
		h.o.Count(endpoint, result, step)
	}
}

// resultOf is the AttestOptions.Count result (and step) of an answer:
// result as the endpoint set it when it answered itself, else aerr's.
func resultOf(result string, aerr *apiError) (string, string) {
	switch {
	case aerr == nil:
		return result, ""
	case aerr.code == CodeAttestationInvalid:
		return ResultFailed, aerr.reason
	case aerr.reason == ResultBusy:
		return ResultBusy, ""
	case aerr.status >= 500:
		return ResultError, ""
	}
	return ResultInvalid, ""
}

// Bodies of the attestation endpoints. Pointers tell a missing field
// from an empty one.
type (
	challengeBody struct {
		DeviceID *string `json:"device_id"`
	}
	appleBody struct {
		DeviceID          *string `json:"device_id"`
		KeyID             *string `json:"key_id"`
		AttestationObject *string `json:"attestation_object"`
		Challenge         *string `json:"challenge"`
		DeviceToken       *string `json:"device_token"` // optional: proves the device id's attestation in force
	}
	androidBody struct {
		DeviceID    *string `json:"device_id"`
		Token       *string `json:"token"`
		Challenge   *string `json:"challenge"`
		DeviceToken *string `json:"device_token"` // optional: proves the device id's attestation in force
	}
	assertionBody struct {
		DeviceID   *string `json:"device_id"`
		KeyID      *string `json:"key_id"`
		Assertion  *string `json:"assertion"`
		ClientData *string `json:"client_data"`
	}
)

// Responses of the attestation endpoints.
type (
	challengeResponse struct {
		Challenge string `json:"challenge"`
		ExpiresAt string `json:"expires_at"`
		RequestID string `json:"request_id"`
	}
	verifiedResponse struct {
		Status      string  `json:"status"`
		Counter     *uint32 `json:"counter,omitempty"`
		ExpiresAt   string  `json:"expires_at"`
		DeviceToken string  `json:"device_token"`
		RequestID   string  `json:"request_id"`
	}
)

func (h *attestHandler) challenge(w http.ResponseWriter, r *http.Request, rid string, _ *string) *apiError {
	if h.o.Apple == nil && h.o.Play == nil {
		return notConfigured("attestation is not configured")
	}
	var b challengeBody
	if aerr := decodeStrict(r, &b); aerr != nil {
		return aerr
	}
	id, aerr := requiredID("device_id", b.DeviceID)
	if aerr != nil {
		return aerr
	}
	ch, exp, err := h.o.Challenges.Issue(r.Context(), id, h.o.Now())
	if err != nil {
		return h.failure(r.Context(), rid, "challenge", id, err)
	}
	writeJSON(w, http.StatusOK, challengeResponse{Challenge: ch, ExpiresAt: rfc3339(exp), RequestID: rid})
	return nil
}

func (h *attestHandler) apple(w http.ResponseWriter, r *http.Request, rid string, result *string) *apiError {
	if h.o.Apple == nil {
		return notConfigured("apple attestation is not configured")
	}
	var b appleBody
	if aerr := decodeStrict(r, &b); aerr != nil {
		return aerr
	}
	id, aerr := requiredID("device_id", b.DeviceID)
	if aerr != nil {
		return aerr
	}
	keyID, aerr := requiredB64("key_id", b.KeyID)
	if aerr != nil {
		return aerr
	}
	obj, aerr := requiredB64("attestation_object", b.AttestationObject)
	if aerr != nil {
		return aerr
	}
	challenge, aerr := requiredID("challenge", b.Challenge)
	if aerr != nil {
		return aerr
	}
	ctx, now := r.Context(), h.o.Now()
	if err := h.o.Challenges.Check(ctx, id, challenge, now); err != nil {
		return h.failure(ctx, rid, "apple", id, err)
	}
	cdh := sha256.Sum256([]byte(challenge))
	if !h.gate.enter(ctx) {
		return h.saturated(ctx, rid, "apple")
	}
	key, err := h.o.Apple.VerifyAttestation(obj, keyID, cdh[:], now)
	h.gate.leave()
	if err != nil {
		return h.failure(ctx, rid, "apple", id, err)
	}
	// used up only by an attestation that verified: a garbage one costs
	// the store nothing, and of two racing copies one passes (and takes
	// the budget of a new id: the copy that lost takes none)
	if err := h.o.Challenges.Consume(ctx, id, challenge, now); err != nil {
		return h.failure(ctx, rid, "apple", id, err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.PublicKey)
	if err != nil {
		return h.failure(ctx, rid, "apple", id, err)
	}
	st := attestation.Status{Platform: attestation.PlatformApple, Verified: true, VerifiedAt: now, ExpiresAt: now.Add(h.o.ValidFor),
		KeyID: base64.StdEncoding.EncodeToString(key.KeyID), Counter: key.Counter, PublicKey: der, Reason: "app attest verified"}
	st.HeldUntil = st.ExpiresAt.Add(h.o.HoldFor)
	cur, aerr := h.claim(ctx, rid, id, st, b.DeviceToken)
	if aerr != nil {
		return aerr
	}
	if !h.budget(w, r, rid, cur, result) {
		return nil
	}
	if cur != nil && cur.Platform == attestation.PlatformApple && cur.KeyID == st.KeyID && cur.Counter > st.Counter {
		// the same key attested again: its counter never goes back, or
		// the assertions it signed since would pass once more
		st.Counter = cur.Counter
	}
	return h.verified(ctx, w, rid, id, st)
}

func (h *attestHandler) android(w http.ResponseWriter, r *http.Request, rid string, result *string) *apiError {
	if h.o.Play == nil {
		return notConfigured("android attestation is not configured")
	}
	var b androidBody
	if aerr := decodeStrict(r, &b); aerr != nil {
		return aerr
	}
	id, aerr := requiredID("device_id", b.DeviceID)
	if aerr != nil {
		return aerr
	}
	if b.Token == nil || *b.Token == "" {
		return badRequest(`field "token" is required`)
	}
	challenge, aerr := requiredID("challenge", b.Challenge)
	if aerr != nil {
		return aerr
	}
	ctx, now := r.Context(), h.o.Now()
	if err := h.o.Challenges.Check(ctx, id, challenge, now); err != nil {
		return h.failure(ctx, rid, "android", id, err)
	}
	if !h.gate.enter(ctx) {
		return h.saturated(ctx, rid, "android")
	}
	_, err := h.o.Play.Verify(*b.Token, challenge, now)
	h.gate.leave()
	if err != nil {
		return h.failure(ctx, rid, "android", id, err)
	}
	if err := h.o.Challenges.Consume(ctx, id, challenge, now); err != nil {
		return h.failure(ctx, rid, "android", id, err)
	}
	st := attestation.Status{Platform: attestation.PlatformAndroid, Verified: true, VerifiedAt: now, ExpiresAt: now.Add(h.o.ValidFor),
		Reason: "play integrity verified"}
	st.HeldUntil = st.ExpiresAt.Add(h.o.HoldFor)
	cur, aerr := h.claim(ctx, rid, id, st, b.DeviceToken)
	if aerr != nil {
		return aerr
	}
	if !h.budget(w, r, rid, cur, result) {
		return nil
	}
	return h.verified(ctx, w, rid, id, st)
}

// claim refuses a fresh attestation st of device id while the id is
// bound to an attestation of another App Attest key, or of Play Integrity
// (which has no key), unless the request presents the last device token
// the id was given (by that attestation or its last assertion), expired
// or not: an older token, even unexpired, is refused. An id is bound while
// its attestation is in force and, after it lapsed, while it is held
// (Status.HeldUntil: trusted_for after its end, as long as the id may be
// a trusted device of an account). A device id is no secret: without
// this, any genuine device could attest under another's id, at once or
// once the owner's attestation lapsed, and be handed a token the engine
// takes as that device's, with the trust the owner earned on its accounts
// (exempt_attested, its own budget), and the owner's key would be
// forgotten. It returns the id's attestation kept so far, nil when none:
// then st binds a new id, and takes from the address's attestation budget
// (takeAttestBudget); a renewal does not. A fresh attestation of the same
// App Attest key keeps its counter.
func (h *attestHandler) claim(ctx context.Context, rid, id string, st attestation.Status, token *string) (*attestation.Status, *apiError) {
	cur, ok, err := h.o.Devices.Get(ctx, id)
	if err != nil {
		return nil, h.failure(ctx, rid, "device", id, err)
	}
	now := h.o.Now()
	if !ok || !cur.Kept(now) {
		return nil, nil
	}
	if cur.Platform == attestation.PlatformApple && st.Platform == attestation.PlatformApple && cur.KeyID == st.KeyID {
		return &cur, nil
	}
	if token != nil {
		// the last token the id was given (its expiry is the status's, to
		// the second: Issue rounds down), expired or not; an older one,
		// even unexpired, proves nothing once the id was verified again
		// (a token seen once must not outlive a reset of its device)
		if exp, ok := h.o.Tokens.Expiry(*token, id); ok && exp.Unix() >= cur.ExpiresAt.Unix() {
			return &cur, nil
		}
	}
	if cur.Valid(now) {
		return nil, h.failure(ctx, rid, "device", id, &attestation.Error{Step: attestation.StepDevice,
			Err: fmt.Errorf("device_id holds a valid %s attestation until %s; send its device_token to replace it", cur.Platform, rfc3339(cur.ExpiresAt))})
	}
	return nil, h.failure(ctx, rid, "device", id, &attestation.Error{Step: attestation.StepDevice,
		Err: fmt.Errorf("device_id is bound to its last %s attestation (ended %s) until %s, while it may be a trusted device; renew with its key or send its last device_token, or use a new device_id",
			cur.Platform, rfc3339(cur.ExpiresAt), rfc3339(cur.KeptUntil()))})
}

// budget takes the address's attestation budget for an attestation that
// binds a new id (cur nil: claim), which a renewal does not, and sets
// result to what the answer will be; false when the budget answered.
func (h *attestHandler) budget(w http.ResponseWriter, r *http.Request, rid string, cur *attestation.Status, result *string) bool {
	if cur != nil {
		*result = ResultRenewed
		return true
	}
	if !takeAttestBudget(w, r, rid) {
		*result = ResultLimited
		return false
	}
	*result = ResultVerified
	return true
}

// verified records a fresh attestation of device id and answers 200.
func (h *attestHandler) verified(ctx context.Context, w http.ResponseWriter, rid, id string, st attestation.Status) *apiError {
	if aerr := h.record(ctx, rid, id, st, false); aerr != nil {
		return aerr
	}
	h.o.Logger.LogAttrs(ctx, slog.LevelInfo, "attestation verified", slog.String("platform", st.Platform), slog.String("device_id", id), slog.String("request_id", rid))
	writeJSON(w, http.StatusOK, verifiedResponse{Status: "verified", ExpiresAt: rfc3339(st.ExpiresAt),
		DeviceToken: h.o.Tokens.Issue(id, st.ExpiresAt), RequestID: rid})
	return nil
}

func (h *attestHandler) assertion(w http.ResponseWriter, r *http.Request, rid string, result *string) *apiError {
	if h.o.Apple == nil {
		return notConfigured("apple attestation is not configured")
	}
	var b assertionBody
	if aerr := decodeStrict(r, &b); aerr != nil {
		return aerr
	}
	id, aerr := requiredID("device_id", b.DeviceID)
	if aerr != nil {
		return aerr
	}
	keyID, aerr := requiredB64("key_id", b.KeyID)
	if aerr != nil {
		return aerr
	}
	asr, aerr := requiredB64("assertion", b.Assertion)
	if aerr != nil {
		return aerr
	}
	if b.ClientData == nil {
		return badRequest(`field "client_data" is required`)
	}
	clientData, ok := decodeStdB64(*b.ClientData)
	if !ok {
		return badRequest(`field "client_data" is not standard base64`)
	}
	ctx, now := r.Context(), h.o.Now()
	st, found, err := h.o.Devices.Get(ctx, id)
	if err != nil {
		return h.failure(ctx, rid, "assertion", id, err)
	}
	keyText := base64.StdEncoding.EncodeToString(keyID)
	if !found || !st.Kept(now) || st.Platform != attestation.PlatformApple || st.KeyID != keyText {
		return h.failure(ctx, rid, "assertion", id, &attestation.Error{Step: attestation.StepKeyID,
			Err: errors.New("no attested App Attest key for this device and key id; attest first")})
	}
	pub, err := st.Key()
	if err != nil {
		return h.failure(ctx, rid, "assertion", id, err)
	}
	n, err := h.o.Apple.VerifyAssertion(asr, clientData, pub, st.Counter)
	if err != nil {
		return h.failure(ctx, rid, "assertion", id, err)
	}
	st.Counter, st.VerifiedAt, st.ExpiresAt = n, now, now.Add(h.o.ValidFor)
	st.HeldUntil = st.ExpiresAt.Add(h.o.HoldFor)
	if aerr := h.record(ctx, rid, id, st, true); aerr != nil {
		return aerr
	}
	*result = ResultRenewed
	writeJSON(w, http.StatusOK, verifiedResponse{Status: "verified", Counter: &n, ExpiresAt: rfc3339(st.ExpiresAt),
		DeviceToken: h.o.Tokens.Issue(id, st.ExpiresAt), RequestID: rid})
	return nil
}

// record stores the device's status (advancing the counter atomically
// when advance is set). No multiplier is stored: the device's bonus is
// proven per request by its device token (6.3), never claimed by its id.
func (h *attestHandler) record(ctx context.Context, rid, id string, st attestation.Status, advance bool) *apiError {
	var err error
	if advance {
		err = h.o.Devices.Advance(ctx, id, st)
	} else {
		err = h.o.Devices.Put(ctx, id, st)
	}
	if err != nil {
		return h.failure(ctx, rid, "record", id, err)
	}
	return nil
}

// failure turns err into the response: an *attestation.Error is 400
// ATTESTATION_INVALID with "<step>: <cause>", a store failure 503, anything
// else 500. Each is logged.
func (h *attestHandler) failure(ctx context.Context, rid, what, id string, err error) *apiError {
	var ae *attestation.Error
	switch {
	case errors.As(err, &ae):
		if n, ok := h.failed.Allow(h.o.Now()); ok {
			h.o.Logger.LogAttrs(ctx, slog.LevelInfo, "attestation failed", slog.String("endpoint", what), slog.String("device_id", id),
				slog.String("step", ae.Step), slog.String("err", ae.Err.Error()), slog.String("request_id", rid), slog.Int64("suppressed", n))
		}
		return &apiError{status: http.StatusBadRequest, code: CodeAttestationInvalid, message: ae.Message(),
			details: string(jsonw.AppendString(jsonw.AppendMember(nil, "step"), ae.Step)), reason: ae.Step}
	case errors.Is(err, attestation.ErrUnavailable), errors.Is(err, bucket.ErrUnavailable), errors.Is(err, bucket.ErrFull):
		h.o.Logger.LogAttrs(ctx, slog.LevelError, "attestation: store", slog.String("endpoint", what), slog.String("err", err.Error()), slog.String("request_id", rid))
		return &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "store unavailable", details: `"retry_after_ms":1000`}
	}
	h.o.Logger.LogAttrs(ctx, slog.LevelError, "attestation: internal error", slog.String("endpoint", what), slog.String("err", err.Error()), slog.String("request_id", rid))
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"}
}

// saturated answers an attestation that found the verifications' queue full
// (AttestOptions.MaxVerifying), or its request ended waiting: 503, to
// retry in a second.
func (h *attestHandler) saturated(ctx context.Context, rid, what string) *apiError {
	if n, ok := h.busy.Allow(h.o.Now()); ok {
		h.o.Logger.LogAttrs(ctx, slog.LevelWarn, "attestation: verifications saturated", slog.String("endpoint", what), slog.String("request_id", rid),
			slog.Int64("suppressed", n))
	}
	return &apiError{status: http.StatusServiceUnavailable, code: CodeLimiterUnavailable, message: "too many attestations are being verified; retry",
		details: `"retry_after_ms":1000`, reason: ResultBusy}
}

func notConfigured(msg string) *apiError {
	return &apiError{status: http.StatusNotFound, code: CodeNotFound, message: msg}
}

// requiredID checks a required identifier field.
func requiredID(name string, v *string) (string, *apiError) {
	if v == nil || *v == "" {
		return "", badRequest(`field "` + name + `" is required`)
	}
	if msg := CheckID(*v); msg != "" {
		return "", badRequest(`field "` + name + `" ` + msg)
	}
	return *v, nil
}

// requiredB64 checks and decodes a required standard base64 field.
func requiredB64(name string, v *string) ([]byte, *apiError) {
	if v == nil || *v == "" {
		return nil, badRequest(`field "` + name + `" is required`)
	}
	b, ok := decodeStdB64(*v)
	if !ok || len(b) == 0 {
		return nil, badRequest(`field "` + name + `" is not standard base64`)
	}
	return b, nil
}

// decodeStdB64 decodes standard base64, padded or not.
func decodeStdB64(s string) ([]byte, bool) {
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	return b, err == nil
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// attestationView is the "attestation" field of GET
// /v1/admin/subjects/device/{id}.
type attestationView struct {
	Platform   string `json:"platform"`
	Verified   bool   `json:"verified"`
	VerifiedAt string `json:"verified_at"`
	ExpiresAt  string `json:"expires_at"`
	Counter    uint32 `json:"counter"`
	// HeldUntil is how long the device id stays bound to this
	// attestation (its key, its last token) past expires_at.
	HeldUntil string `json:"held_until,omitempty"`
}

// AttestationView returns the device's attestation for the "attestation"
// field of GET /v1/admin/subjects/device/{id}: a JSON-able
// {"platform", "verified", "verified_at", "expires_at", "counter",
// "held_until"}, or nil (an untyped nil, rendered null) when the device
// has none kept or devices is nil. An attestation that lapsed and is held
// (its expires_at past, held_until not) is shown: the id is still bound
// to it. Errors come from the store (attestation.ErrUnavailable).
func AttestationView(ctx context.Context, devices attestation.Devices, id string) (any, error) {
	if devices == nil {
		return nil, nil
	}
	st, ok, err := devices.Get(ctx, id)
	if err != nil || !ok {
		return nil, err
	}
	v := attestationView{Platform: st.Platform, Verified: st.Verified, VerifiedAt: rfc3339(st.VerifiedAt), ExpiresAt: rfc3339(st.ExpiresAt), Counter: st.Counter}
	if st.HeldUntil.After(st.ExpiresAt) {
		v.HeldUntil = rfc3339(st.HeldUntil)
	}
	return v, nil
}
