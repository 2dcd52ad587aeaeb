package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// attNow is the fixed clock of the attestation handler tests.
var attNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	attAppID   = "TEAMID1234.com.example.app"
	attPackage = "com.example.app"
)

// attEnv is one attestation handler with its generated PKI and keys.
type attEnv struct {
	h       http.Handler
	ca      *attestationtest.CA
	keys    *attestationtest.PlayKeys
	store   *bucket.MemoryStore
	devices attestation.Devices
	tokens  *attestation.Tokens
}

func newAttEnv(t testing.TB, ch attestation.Challenges, dev attestation.Devices) *attEnv {
	t.Helper()
	return newAttEnvClock(t, ch, dev, func() time.Time { return attNow }, 0)
}

// newAttEnvClock is newAttEnv with the handler's clock and HoldFor (0:
// the default).
func newAttEnvClock(t testing.TB, ch attestation.Challenges, dev attestation.Devices, clock func() time.Time, hold time.Duration) *attEnv {
	t.Helper()
	e := &attEnv{
		ca:      attestationtest.NewCA(t, attNow),
		keys:    attestationtest.NewPlayKeys(t),
		store:   bucket.NewMemoryStore(bucket.MemoryOptions{Now: clock}),
		devices: dev,
	}
	tokens, err := attestation.NewTokens([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	e.tokens = tokens
	play := e.keys.Play(attPackage)
	play.MaxAge = 5 * time.Minute
	e.h = NewAttestHandler(AttestOptions{
		Apple:      e.ca.Apple(attAppID, attestation.EnvironmentProduction),
		Play:       play,
		Challenges: ch,
		Devices:    dev,
		Tokens:     tokens,
		ValidFor:   24 * time.Hour,
		HoldFor:    hold,
		Now:        clock,
	})
	return e
}

// attResponse is a decoded response: success fields and the envelope.
type attResponse struct {
	Status    string  `json:"status"`
	Challenge string  `json:"challenge"`
	ExpiresAt string  `json:"expires_at"`
	Counter   *uint32 `json:"counter"`
	Token     string  `json:"device_token"`
	RequestID string  `json:"request_id"`
	Error     *struct {
		Code      string         `json:"code"`
		Message   string         `json:"message"`
		Details   map[string]any `json:"details"`
		RequestID string         `json:"request_id"`
	} `json:"error"`
}

func attDo(t *testing.T, h http.Handler, method, path, body string) (int, attResponse) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("X-Request-Id", "req-att")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var resp attResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, path, w.Body.String(), err)
	}
	if w.Header().Get("X-Request-Id") != "req-att" {
		t.Fatalf("X-Request-Id = %q", w.Header().Get("X-Request-Id"))
	}
	if resp.RequestID != "req-att" && (resp.Error == nil || resp.Error.RequestID != "req-att") {
		t.Fatalf("no request_id in %s", w.Body.String())
	}
	return w.Code, resp
}

func attJSON(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func attB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// challenge asks the handler for a challenge for device.
func (e *attEnv) challenge(t *testing.T, device string) string {
	t.Helper()
	code, resp := attDo(t, e.h, "POST", "/v1/attest/challenge", attJSON("device_id", device))
	if code != 200 || len(resp.Challenge) < 43 || resp.ExpiresAt != "2025-06-01T12:05:00Z" {
		t.Fatalf("challenge: %d %+v", code, resp)
	}
	return resp.Challenge
}

// attest builds an attestation object over challenge with o.
func (e *attEnv) attest(t testing.TB, challenge string, o attestationtest.Options) *attestationtest.Attested {
	t.Helper()
	if o.AppID == "" {
		o.AppID = attAppID
	}
	if o.ClientDataHash == nil {
		h := sha256.Sum256([]byte(challenge))
		o.ClientDataHash = h[:]
	}
	return e.ca.Attest(t, o)
}

func attAppleBody(device string, att *attestationtest.Attested, challenge string) string {
	return attJSON("device_id", device, "key_id", attB64(att.KeyID), "attestation_object", attB64(att.Object), "challenge", challenge)
}

func attAssertionBody(t *testing.T, device string, att *attestationtest.Attested, counter uint32, clientData string) string {
	return attJSON("device_id", device, "key_id", attB64(att.KeyID),
		"assertion", attB64(attestationtest.Assertion(t, att.Key, attAppID, counter, []byte(clientData))), "client_data", attB64([]byte(clientData)))
}

func (e *attEnv) playToken(t testing.TB, nonce string, change func(p map[string]any)) string {
	t.Helper()
	p := attestationtest.PlayPayload(attPackage, nonce, attNow.Add(-10*time.Second))
	if change != nil {
		change(p)
	}
	return e.keys.Token(t, p)
}

// attBackends returns the Challenges/Devices pairs to run against.
func attBackends(t *testing.T) map[string]func() (attestation.Challenges, attestation.Devices) {
	c, prefix := testenv.Redis(t)
	return map[string]func() (attestation.Challenges, attestation.Devices){
		"memory": func() (attestation.Challenges, attestation.Devices) {
			return attestation.NewMemoryChallenges(100), attestation.NewMemoryDevices(100, func() time.Time { return attNow })
		},
		"redis": func() (attestation.Challenges, attestation.Devices) {
			return attestation.NewRedisChallenges(c, prefix), attestation.NewRedisDevices(c, prefix)
		},
	}
}

// TestAttestFlow runs the whole flow on each backend: challenge, App
// Attest, multiplier, assertions (and a replay), a replayed challenge,
// then Play Integrity.
func TestAttestFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, backend := range attBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch0, dev0 := backend()
			e := newAttEnv(t, ch0, dev0)
			ch := e.challenge(t, "d1")
			att := e.attest(t, ch, attestationtest.Options{})
			code, resp := attDo(t, e.h, "POST", "/v1/attest/apple", attAppleBody("d1", att, ch))
			if code != 200 || resp.Status != "verified" || resp.ExpiresAt != "2025-06-02T12:00:00Z" {
				t.Fatalf("apple: %d %+v", code, resp)
			}
			// The answer carries a device token of d1 that lives as long as
			// the attestation (6.3); no multiplier is stored for the id.
			if !e.tokens.Verify(resp.Token, "d1", attNow.Add(24*time.Hour-time.Second)) ||
				e.tokens.Verify(resp.Token, "d1", attNow.Add(24*time.Hour)) || e.tokens.Verify(resp.Token, "d2", attNow) {
				t.Fatalf("apple device token %q: not a token of d1 for 24h", resp.Token)
			}
			if ms, err := e.store.Multipliers(ctx, bucket.Subject{Kind: "device", ID: "d1"}); err != nil || len(ms) != 0 {
				t.Fatalf("multipliers = %+v, %v", ms, err)
			}
			view, err := AttestationView(ctx, e.devices, "d1")
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := json.Marshal(view); string(b) != `{"platform":"apple","verified":true,"verified_at":"2025-06-01T12:00:00Z","expires_at":"2025-06-02T12:00:00Z","counter":0,"held_until":"2025-07-02T12:00:00Z"}` {
				t.Fatalf("view = %s", b)
			}

			// The replayed challenge fails, even with a fresh valid object.
			code, resp = attDo(t, e.h, "POST", "/v1/attest/apple", attAppleBody("d1", e.attest(t, ch, attestationtest.Options{}), ch))
			if code != 400 || resp.Error.Code != CodeAttestationInvalid || !strings.HasPrefix(resp.Error.Message, "challenge: ") {
				t.Fatalf("replayed challenge: %d %+v", code, resp.Error)
			}

			for i, step := range []struct {
				counter  uint32
				wantCode int
				wantMsg  string
			}{
				{1, 200, ""},
				{1, 400, "counter: 1 is not greater than the last seen 1"},
				{5, 200, ""},
				{4, 400, "counter: "},
			} {
				code, resp := attDo(t, e.h, "POST", "/v1/attest/apple/assertion", attAssertionBody(t, "d1", att, step.counter, fmt.Sprintf(`{"n":%d}`, i)))
				if code != step.wantCode {
					t.Fatalf("assertion %d: %d %+v", i, code, resp.Error)
				}
				if code == 200 {
					if resp.Status != "verified" || resp.Counter == nil || *resp.Counter != step.counter || !e.tokens.Verify(resp.Token, "d1", attNow) {
						t.Fatalf("assertion %d: %+v", i, resp)
					}
					continue
				}
				if resp.Token != "" {
					t.Fatalf("failed assertion %d answered a token", i)
				}
				if resp.Error.Code != CodeAttestationInvalid || !strings.HasPrefix(resp.Error.Message, step.wantMsg) || resp.Error.Details["step"] != "counter" {
					t.Fatalf("assertion %d: %+v", i, resp.Error)
				}
			}
			if v, _ := AttestationView(ctx, e.devices, "d1"); v.(attestationView).Counter != 5 {
				t.Fatalf("view after assertions = %+v", v)
			}

			// Play Integrity on another device.
			ch = e.challenge(t, "a1")
			code, resp = attDo(t, e.h, "POST", "/v1/attest/android", attJSON("device_id", "a1", "token", e.playToken(t, ch, nil), "challenge", ch))
			if code != 200 || resp.Status != "verified" || resp.ExpiresAt != "2025-06-02T12:00:00Z" || resp.Counter != nil {
				t.Fatalf("android: %d %+v %+v", code, resp, resp.Error)
			}
			if !e.tokens.Verify(resp.Token, "a1", attNow) || e.tokens.Verify(resp.Token, "d1", attNow) {
				t.Fatalf("android device token %q is not a1's", resp.Token)
			}
			if v, _ := AttestationView(ctx, e.devices, "a1"); v.(attestationView).Platform != "android" {
				t.Fatalf("android view = %+v", v)
			}
			if v, err := AttestationView(ctx, e.devices, "nobody"); v != nil || err != nil {
				t.Fatalf("view of an unattested device = %v, %v", v, err)
			}
		})
	}
}

// TestAttestConcurrentAssertions sends one assertion many times at once:
// exactly one passes (the counter's compare-and-set), on each backend.
func TestAttestConcurrentAssertions(t *testing.T) {
	t.Parallel()
	for name, backend := range attBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch0, dev0 := backend()
			e := newAttEnv(t, ch0, dev0)
			ch := e.challenge(t, "d1")
			att := e.attest(t, ch, attestationtest.Options{})
			if code, resp := attDo(t, e.h, "POST", "/v1/attest/apple", attAppleBody("d1", att, ch)); code != 200 {
				t.Fatalf("apple: %d %+v", code, resp.Error)
			}
			body := attAssertionBody(t, "d1", att, 1, "same")
			codes := make(chan int, 12)
			for range 12 {
				go func() {
					r := httptest.NewRequest("POST", "/v1/attest/apple/assertion", strings.NewReader(body))
					w := httptest.NewRecorder()
					e.h.ServeHTTP(w, r)
					codes <- w.Code
				}()
			}
			ok := 0
			for range 12 {
				switch c := <-codes; c {
				case 200:
					ok++
				case 400:
				default:
					t.Errorf("status %d", c)
				}
			}
			if ok != 1 {
				t.Fatalf("%d concurrent replays passed, want 1", ok)
			}
		})
	}
}

// TestAttestFailures checks that every failure answers with the right
// status and code, and that its message names the failed step (or field).
func TestAttestFailures(t *testing.T) {
	t.Parallel()
	other := attestationtest.NewCA(t, attNow)
	otherKeys := attestationtest.NewPlayKeys(t)
	sum := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

	type body func(t *testing.T, e *attEnv) string
	apple := func(o attestationtest.Options) body {
		return func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "d1")
			return attAppleBody("d1", e.attest(t, ch, o), ch)
		}
	}
	android := func(change func(p map[string]any)) body {
		return func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "a1")
			return attJSON("device_id", "a1", "token", e.playToken(t, ch, change), "challenge", ch)
		}
	}
	fixed := func(s string) body { return func(*testing.T, *attEnv) string { return s } }
	verdict := func(section, key string, v any) func(p map[string]any) {
		return func(p map[string]any) { p[section].(map[string]any)[key] = v }
	}
	cases := []struct {
		name     string
		path     string
		method   string
		body     body
		wantCode int
		wantErr  string // envelope code
		wantMsg  string // message prefix
	}{
		// App Attest, one per step.
		{"apple wrong root", PathAttestApple, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "d1")
			return attAppleBody("d1", other.Attest(t, attestationtest.Options{AppID: attAppID, ClientDataHash: sum(ch)}), ch)
		}, 400, CodeAttestationInvalid, "certificate chain: "},
		{"apple expired leaf", PathAttestApple, "", apple(attestationtest.Options{NotBefore: attNow.Add(-72 * time.Hour), NotAfter: attNow.Add(-time.Minute)}), 400, CodeAttestationInvalid, "certificate chain: "},
		{"apple wrong nonce", PathAttestApple, "", apple(attestationtest.Options{Nonce: sum("other")}), 400, CodeAttestationInvalid, "nonce: does not match the certificate's nonce extension"},
		{"apple challenge hashed differently", PathAttestApple, "", apple(attestationtest.Options{ClientDataHash: sum("raw")}), 400, CodeAttestationInvalid, "nonce: "},
		{"apple wrong app id", PathAttestApple, "", apple(attestationtest.Options{AppID: "TEAMID1234.com.example.other"}), 400, CodeAttestationInvalid, "rp id: "},
		{"apple wrong key id", PathAttestApple, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "d1")
			return attJSON("device_id", "d1", "key_id", attB64(sum("k")), "attestation_object", attB64(e.attest(t, ch, attestationtest.Options{}).Object), "challenge", ch)
		}, 400, CodeAttestationInvalid, "key id: "},
		{"apple non-zero counter", PathAttestApple, "", apple(attestationtest.Options{Counter: 1}), 400, CodeAttestationInvalid, "counter: "},
		{"apple development aaguid", PathAttestApple, "", apple(attestationtest.Options{AAGUID: attestationtest.AAGUIDDevelopment}), 400, CodeAttestationInvalid, "aaguid: "},
		{"apple credential id", PathAttestApple, "", apple(attestationtest.Options{CredentialID: []byte("x")}), 400, CodeAttestationInvalid, "credential id: "},
		{"apple other format", PathAttestApple, "", apple(attestationtest.Options{Fmt: "tpm"}), 400, CodeAttestationInvalid, "format: "},
		{"apple garbage object", PathAttestApple, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "d1")
			return attJSON("device_id", "d1", "key_id", attB64(sum("k")), "attestation_object", attB64([]byte("garbage")), "challenge", ch)
		}, 400, CodeAttestationInvalid, "decode: "},
		{"apple unknown challenge", PathAttestApple, "", fixed(attJSON("device_id", "d1", "key_id", "AAAA", "attestation_object", "AAAA", "challenge", strings.Repeat("A", 43))), 400, CodeAttestationInvalid, "challenge: "},
		{"apple challenge of another device", PathAttestApple, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "d2")
			return attAppleBody("d1", e.attest(t, ch, attestationtest.Options{}), ch)
		}, 400, CodeAttestationInvalid, "challenge: "},

		// Play Integrity, one per step.
		{"android wrong package", PathAttestAndroid, "", android(verdict("requestDetails", "requestPackageName", "com.evil")), 400, CodeAttestationInvalid, "package name: "},
		{"android wrong nonce", PathAttestAndroid, "", android(verdict("requestDetails", "nonce", "other")), 400, CodeAttestationInvalid, "nonce: "},
		{"android expired", PathAttestAndroid, "", android(verdict("requestDetails", "timestampMillis", fmt.Sprint(attNow.Add(-6*time.Minute).UnixMilli()))), 400, CodeAttestationInvalid, "timestamp: "},
		{"android not recognized", PathAttestAndroid, "", android(verdict("appIntegrity", "appRecognitionVerdict", "UNEVALUATED")), 400, CodeAttestationInvalid, "app verdict: "},
		{"android no device integrity", PathAttestAndroid, "", android(verdict("deviceIntegrity", "deviceRecognitionVerdict", []string{})), 400, CodeAttestationInvalid, "device verdict: "},
		{"android bad signature", PathAttestAndroid, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "a1")
			tok := e.keys.TokenSignedBy(t, attestationtest.PlayPayload(attPackage, ch, attNow), otherKeys.Signing)
			return attJSON("device_id", "a1", "token", tok, "challenge", ch)
		}, 400, CodeAttestationInvalid, "verify signature: "},
		{"android undecryptable", PathAttestAndroid, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "a1")
			return attJSON("device_id", "a1", "token", otherKeys.Token(t, attestationtest.PlayPayload(attPackage, ch, attNow)), "challenge", ch)
		}, 400, CodeAttestationInvalid, "decrypt: "},

		// Assertions.
		{"assertion without attestation", PathAttestAssertion, "", func(t *testing.T, e *attEnv) string {
			return attAssertionBody(t, "d9", e.attest(t, "x", attestationtest.Options{}), 1, "cd")
		}, 400, CodeAttestationInvalid, "key id: "},
		{"assertion bad signature", PathAttestAssertion, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "d1")
			att := e.attest(t, ch, attestationtest.Options{})
			if code, _ := attDo(t, e.h, "POST", PathAttestApple, attAppleBody("d1", att, ch)); code != 200 {
				t.Fatalf("attest: %d", code)
			}
			forged := *att
			forged.Key = e.attest(t, "y", attestationtest.Options{}).Key
			return attAssertionBody(t, "d1", &forged, 1, "cd")
		}, 400, CodeAttestationInvalid, "signature: "},
		{"assertion for another key id", PathAttestAssertion, "", func(t *testing.T, e *attEnv) string {
			ch := e.challenge(t, "d1")
			if code, _ := attDo(t, e.h, "POST", PathAttestApple, attAppleBody("d1", e.attest(t, ch, attestationtest.Options{}), ch)); code != 200 {
				t.Fatalf("attest: %d", code)
			}
			return attAssertionBody(t, "d1", e.attest(t, "z", attestationtest.Options{}), 1, "cd")
		}, 400, CodeAttestationInvalid, "key id: "},

		// Malformed bodies name the field.
		{"missing device_id", PathAttestChallenge, "", fixed(`{}`), 400, CodeBadRequest, `field "device_id" is required`},
		{"device_id with a control byte", PathAttestChallenge, "", fixed(`{"device_id":"a\u0001"}`), 400, CodeBadRequest, `field "device_id" contains a control character`},
		{"unknown field", PathAttestChallenge, "", fixed(`{"device_id":"d","extra":1}`), 400, CodeBadRequest, `unknown field "extra"`},
		{"not JSON", PathAttestApple, "", fixed(`{"device_id":`), 400, CodeBadRequest, "body: "},
		{"trailing data", PathAttestChallenge, "", fixed(`{"device_id":"d"} {}`), 400, CodeBadRequest, "body: unexpected data"},
		{"device_id a number", PathAttestChallenge, "", fixed(`{"device_id":7}`), 400, CodeBadRequest, `field "device_id" must be a string`},
		{"key_id not base64", PathAttestApple, "", fixed(attJSON("device_id", "d", "key_id", "%%%", "attestation_object", "AAAA", "challenge", "c")), 400, CodeBadRequest, `field "key_id" is not standard base64`},
		{"attestation_object missing", PathAttestApple, "", fixed(attJSON("device_id", "d", "key_id", "AAAA", "challenge", "c")), 400, CodeBadRequest, `field "attestation_object" is required`},
		{"challenge missing", PathAttestApple, "", fixed(attJSON("device_id", "d", "key_id", "AAAA", "attestation_object", "AAAA")), 400, CodeBadRequest, `field "challenge" is required`},
		{"token missing", PathAttestAndroid, "", fixed(attJSON("device_id", "d", "challenge", "c")), 400, CodeBadRequest, `field "token" is required`},
		{"assertion url-safe base64", PathAttestAssertion, "", fixed(attJSON("device_id", "d", "key_id", "AAAA", "assertion", "-_-_", "client_data", "")), 400, CodeBadRequest, `field "assertion" is not standard base64`},
		{"client_data missing", PathAttestAssertion, "", fixed(attJSON("device_id", "d", "key_id", "AAAA", "assertion", "AAAA")), 400, CodeBadRequest, `field "client_data" is required`},
		{"body over 64 KiB", PathAttestChallenge, "", fixed(`{"device_id":"` + strings.Repeat("a", 70<<10) + `"}`), 413, CodePayloadTooLarge, "body is larger than 64 KiB"},

		// Routing.
		{"GET challenge", PathAttestChallenge, "GET", fixed(""), 405, CodeMethodNotAllowed, "GET is not allowed here; use POST"},
		{"unknown path", "/v1/attest/windows", "", fixed(`{}`), 404, CodeNotFound, "no such endpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newAttEnv(t, attestation.NewMemoryChallenges(100), attestation.NewMemoryDevices(100, func() time.Time { return attNow }))
			method := c.method
			if method == "" {
				method = "POST"
			}
			code, resp := attDo(t, e.h, method, c.path, c.body(t, e))
			if code != c.wantCode || resp.Error == nil || resp.Error.Code != c.wantErr || !strings.HasPrefix(resp.Error.Message, c.wantMsg) {
				t.Fatalf("got %d %+v, want %d %s %q...", code, resp.Error, c.wantCode, c.wantErr, c.wantMsg)
			}
			if c.wantErr == CodeAttestationInvalid && !strings.HasPrefix(resp.Error.Message, fmt.Sprint(resp.Error.Details["step"])+": ") {
				t.Fatalf("details.step %q does not match the message %q", resp.Error.Details["step"], resp.Error.Message)
			}
			if c.wantCode >= 400 && c.wantCode < 500 && c.path != PathAttestChallenge {
				if resp.Token != "" {
					t.Fatalf("a failure answered a device token")
				}
			}
		})
	}
}

// TestAttestNotConfiguredAndStoreDown checks 404 for an unconfigured
// platform and 503 when the challenge store is unreachable.
func TestAttestNotConfiguredAndStoreDown(t *testing.T) {
	t.Parallel()
	none := NewAttestHandler(AttestOptions{Now: func() time.Time { return attNow }})
	keys := attestationtest.NewPlayKeys(t)
	androidOnly := NewAttestHandler(AttestOptions{Play: keys.Play(attPackage), Now: func() time.Time { return attNow }})
	dead := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	down := NewAttestHandler(AttestOptions{Play: keys.Play(attPackage), Challenges: attestation.NewRedisChallenges(dead, "x:"),
		Devices: attestation.NewRedisDevices(dead, "x:"), Now: func() time.Time { return attNow }})
	for _, c := range []struct {
		name     string
		h        http.Handler
		path     string
		body     string
		wantCode int
		wantErr  string
		wantMsg  string
	}{
		{"nothing configured", none, PathAttestChallenge, `{"device_id":"d"}`, 404, CodeNotFound, "attestation is not configured"},
		{"apple not configured", androidOnly, PathAttestApple, `{}`, 404, CodeNotFound, "apple attestation is not configured"},
		{"assertion not configured", androidOnly, PathAttestAssertion, `{}`, 404, CodeNotFound, "apple attestation is not configured"},
		{"android not configured", none, PathAttestAndroid, `{}`, 404, CodeNotFound, "android attestation is not configured"},
		{"challenge store down", down, PathAttestChallenge, `{"device_id":"d"}`, 503, CodeLimiterUnavailable, "store unavailable"},
		{"consume store down", down, PathAttestAndroid, attJSON("device_id", "d", "token", "t", "challenge", strings.Repeat("A", 43)), 503, CodeLimiterUnavailable, "store unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, resp := attDo(t, c.h, "POST", c.path, c.body)
			if code != c.wantCode || resp.Error == nil || resp.Error.Code != c.wantErr || resp.Error.Message != c.wantMsg {
				t.Fatalf("got %d %+v", code, resp.Error)
			}
		})
	}
}

// TestAttestDeviceStoreDown checks that a failing device-status write is
// 503 and answers no token.
func TestAttestDeviceStoreDown(t *testing.T) {
	t.Parallel()
	e := newAttEnv(t, attestation.NewMemoryChallenges(10), attestation.NewMemoryDevices(10, func() time.Time { return attNow }))
	h := e.h.(*attestHandler)
	h.o.Devices = failingDevices{h.o.Devices}
	ch := e.challenge(t, "d1")
	code, resp := attDo(t, h, "POST", PathAttestApple, attAppleBody("d1", e.attest(t, ch, attestationtest.Options{}), ch))
	if code != 503 || resp.Error.Code != CodeLimiterUnavailable || resp.Token != "" {
		t.Fatalf("got %d %+v", code, resp.Error)
	}
}

// failingDevices is a device store whose writes fail.
type failingDevices struct{ attestation.Devices }

func (failingDevices) Put(context.Context, string, attestation.Status) error {
	return attestation.ErrUnavailable
}

// TestAttestClaimInForce: a device id whose attestation is in force is
// not taken over by another key or by a Play Integrity verdict (a device
// id is no secret), unless the request presents the id's device token;
// the same key may attest again, and an expired attestation is no claim.
func TestAttestClaimInForce(t *testing.T) {
	t.Parallel()
	for name, backend := range attBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ch0, dev0 := backend()
			e := newAttEnv(t, ch0, dev0)
			ch := e.challenge(t, "victim")
			owner := e.attest(t, ch, attestationtest.Options{})
			code, resp := attDo(t, e.h, "POST", "/v1/attest/apple", attAppleBody("victim", owner, ch))
			if code != 200 {
				t.Fatalf("owner: %d %+v", code, resp.Error)
			}
			ownerToken := resp.Token

			ch = e.challenge(t, "victim")
			other := e.attest(t, ch, attestationtest.Options{})
			code, resp = attDo(t, e.h, "POST", "/v1/attest/apple", attAppleBody("victim", other, ch))
			if code != 400 || resp.Error.Code != CodeAttestationInvalid || resp.Error.Details["step"] != "device" || resp.Token != "" ||
				!strings.HasPrefix(resp.Error.Message, "device: device_id holds a valid apple attestation until 2025-06-02T12:00:00Z") {
				t.Fatalf("another key over the owner's: %d %+v token %q", code, resp.Error, resp.Token)
			}
			ch = e.challenge(t, "victim")
			code, resp = attDo(t, e.h, "POST", "/v1/attest/android", attJSON("device_id", "victim", "token", e.playToken(t, ch, nil), "challenge", ch))
			if code != 400 || resp.Error.Details["step"] != "device" || resp.Token != "" {
				t.Fatalf("play verdict over the owner's: %d %+v", code, resp.Error)
			}
			// The owner's key still renews.
			if code, resp := attDo(t, e.h, "POST", "/v1/attest/apple/assertion", attAssertionBody(t, "victim", owner, 1, "renew")); code != 200 {
				t.Fatalf("owner's assertion after the refused takeovers: %d %+v", code, resp.Error)
			}
			// The same key attests again; another key with the owner's token replaces it.
			ch = e.challenge(t, "victim")
			if code, resp := attDo(t, e.h, "POST", "/v1/attest/apple", attAppleBody("victim", e.attest(t, ch, attestationtest.Options{Key: owner.Key}), ch)); code != 200 {
				t.Fatalf("the owner's key again: %d %+v", code, resp.Error)
			}
			ch = e.challenge(t, "victim")
			body := strings.TrimSuffix(attAppleBody("victim", e.attest(t, ch, attestationtest.Options{Key: other.Key}), ch), "}") + `,"device_token":"` + ownerToken + `"}`
			if code, resp := attDo(t, e.h, "POST", "/v1/attest/apple", body); code != 200 {
				t.Fatalf("another key with the owner's token: %d %+v", code, resp.Error)
			}

			// Play Integrity: a second verdict needs the first one's token.
			ch = e.challenge(t, "a1")
			code, resp = attDo(t, e.h, "POST", "/v1/attest/android", attJSON("device_id", "a1", "token", e.playToken(t, ch, nil), "challenge", ch))
			if code != 200 {
				t.Fatalf("android: %d %+v", code, resp.Error)
			}
			androidToken := resp.Token
			ch = e.challenge(t, "a1")
			if code, resp := attDo(t, e.h, "POST", "/v1/attest/android", attJSON("device_id", "a1", "token", e.playToken(t, ch, nil), "challenge", ch)); code != 400 || resp.Error.Details["step"] != "device" {
				t.Fatalf("second android verdict without a token: %d %+v", code, resp.Error)
			}
			for _, tok := range []string{"", "forged", ownerToken} {
				ch = e.challenge(t, "a1")
				if code, _ := attDo(t, e.h, "POST", "/v1/attest/android", attJSON("device_id", "a1", "token", e.playToken(t, ch, nil), "challenge", ch, "device_token", tok)); code != 400 {
					t.Fatalf("android renewal with token %q: %d", tok, code)
				}
			}
			ch = e.challenge(t, "a1")
			if code, resp := attDo(t, e.h, "POST", "/v1/attest/android", attJSON("device_id", "a1", "token", e.playToken(t, ch, nil), "challenge", ch, "device_token", androidToken)); code != 200 {
				t.Fatalf("android renewal with its token: %d %+v", code, resp.Error)
			}
		})
	}
}

// TestAttestClaimHeld: once a device id's attestation lapsed, the id stays
// bound to it while it is held (HoldFor, trusted_for, after its end: the
// id may still be a trusted device of an account): another App Attest key
// or a Play Integrity verdict is refused at step "device" unless the body
// carries a token of the id that was valid at the id's last verification
// (expired or not); the held key renews with an assertion; past the hold
// any device may attest the id. Memory and Redis devices.
func TestAttestClaimHeld(t *testing.T) {
	t.Parallel()
	c, prefix := testenv.Redis(t)
	var now atomic.Int64
	now.Store(attNow.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	at := func(d time.Duration) { now.Store(attNow.Add(d).UnixNano()) }
	backends := map[string]func() (attestation.Challenges, attestation.Devices){
		"memory": func() (attestation.Challenges, attestation.Devices) {
			return attestation.NewMemoryChallenges(100), attestation.NewMemoryDevices(100, clock)
		},
		"redis": func() (attestation.Challenges, attestation.Devices) {
			return attestation.NewRedisChallenges(c, prefix+"held:"), attestation.NewRedisDevices(c, prefix+"held:")
		},
	}
	for _, name := range []string{"memory", "redis"} { // one clock: in turn
		t.Run(name, func(t *testing.T) {
			at(0)
			ctx := context.Background()
			ch0, dev0 := backends[name]()
			e := newAttEnvClock(t, ch0, dev0, clock, 24*time.Hour)
			leaf := func() attestationtest.Options {
				return attestationtest.Options{NotBefore: clock().Add(-time.Hour), NotAfter: clock().Add(72 * time.Hour)}
			}
			attest := func(o attestationtest.Options, token string) (int, attResponse) {
				t.Helper()
				_, r := attDo(t, e.h, "POST", "/v1/attest/challenge", attJSON("device_id", "victim"))
				if o.NotAfter.IsZero() {
					l := leaf()
					o.NotBefore, o.NotAfter = l.NotBefore, l.NotAfter
				}
				body := attAppleBody("victim", e.attest(t, r.Challenge, o), r.Challenge)
				if token != "" {
					body = strings.TrimSuffix(body, "}") + `,"device_token":"` + token + `"}`
				}
				return attDo(t, e.h, "POST", "/v1/attest/apple", body)
			}
			refused := func(what string, code int, resp attResponse) {
				t.Helper()
				if code != 400 || resp.Error == nil || resp.Error.Details["step"] != "device" || resp.Token != "" {
					t.Fatalf("%s: %d %+v token %q, want 400 at step device", what, code, resp.Error, resp.Token)
				}
			}

			ch := e.challenge(t, "victim")
			owner := e.attest(t, ch, leaf())
			code, resp := attDo(t, e.h, "POST", "/v1/attest/apple", attAppleBody("victim", owner, ch))
			if code != 200 {
				t.Fatalf("owner: %d %+v", code, resp.Error)
			}
			first := resp.Token // expires at +24h, the hold ends at +48h

			// lapsed, held: another key, a verdict, a forged or another id's token are refused
			at(25 * time.Hour)
			code, resp = attest(attestationtest.Options{}, "")
			refused("another key over the lapsed owner's", code, resp)
			if want := "device: device_id is bound to its last apple attestation (ended 2025-06-02T12:00:00Z) until 2025-06-03T12:00:00Z"; !strings.HasPrefix(resp.Error.Message, want) {
				t.Fatalf("message %q, want prefix %q", resp.Error.Message, want)
			}
			for _, tok := range []string{forgedToken(first), e.tokens.Issue("other", attNow.Add(24*time.Hour))} {
				code, resp = attest(attestationtest.Options{}, tok)
				refused("another key with token "+tok, code, resp)
			}
			_, r := attDo(t, e.h, "POST", "/v1/attest/challenge", attJSON("device_id", "victim"))
			p := attestationtest.PlayPayload(attPackage, r.Challenge, clock().Add(-10*time.Second))
			code, resp = attDo(t, e.h, "POST", "/v1/attest/android", attJSON("device_id", "victim", "token", e.keys.Token(t, p), "challenge", r.Challenge))
			refused("a play verdict over the lapsed owner's", code, resp)
			if v, err := AttestationView(ctx, e.devices, "victim"); err != nil || v == nil || v.(attestationView).HeldUntil != "2025-06-03T12:00:00Z" {
				t.Fatalf("view of the held id = %+v %v", v, err)
			}

			// the held key renews with an assertion (+25h: until +49h, held until +73h)
			code, resp = attDo(t, e.h, "POST", "/v1/attest/apple/assertion", attAssertionBody(t, "victim", owner, 1, "back"))
			if code != 200 || resp.ExpiresAt != "2025-06-03T13:00:00Z" {
				t.Fatalf("the owner's assertion after the lapse: %d %+v %+v", code, resp, resp.Error)
			}
			renewed := resp.Token

			// lapsed again: a token that had expired before the last
			// verification does not replace the key; the last token does
			at(50 * time.Hour)
			code, resp = attest(attestationtest.Options{}, first)
			refused("another key with a token older than the last verification", code, resp)
			code, resp = attest(attestationtest.Options{}, renewed)
			if code != 200 || resp.Token == "" {
				t.Fatalf("a new key with the last, expired token: %d %+v", code, resp.Error)
			}

			// past the hold (+50h+24h+24h) the id is free
			at(98*time.Hour + time.Second)
			if code, resp = attest(attestationtest.Options{}, ""); code != 200 {
				t.Fatalf("another key past the hold: %d %+v", code, resp.Error)
			}
		})
	}
}

// forgedToken is token with one character of its MAC changed.
func forgedToken(token string) string {
	i := len(token) - 10
	c := "A"
	if token[i] == 'A' {
		c = "B"
	}
	return token[:i] + c + token[i+1:]
}
