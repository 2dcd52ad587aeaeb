package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// FuzzAttestHandler throws arbitrary methods, paths and bodies at the
// attestation endpoints (seeded with a valid challenge request, App Attest
// attestation, assertion and Play Integrity token): the handler never
// panics and answers 2xx or 4xx (503 only when a store fails), always
// with a JSON body.
//
//	go test -run '^$' -fuzz '^FuzzAttestHandler$' -fuzztime 30s -fuzzminimizetime 2s ./api/
func FuzzAttestHandler(f *testing.F) {
	e := newAttEnv(f, nil, nil)
	ch := "q0mBdL1dQ4gW2b3Kc9yRrZs5tXvP7n8aA1bC2dE3fG4"
	att := e.attest(f, ch, attestationtest.Options{})
	f.Add("POST", "challenge", attJSON("device_id", "d1"))
	f.Add("POST", "apple", attAppleBody("d1", att, ch))
	f.Add("POST", "apple/assertion", attJSON("device_id", "d1", "key_id", attB64(att.KeyID),
		"assertion", attB64(attestationtest.Assertion(f, att.Key, attAppID, 1, []byte(`{"n":1}`))), "client_data", attB64([]byte(`{"n":1}`))))
	f.Add("POST", "android", attJSON("device_id", "a1", "token", e.playToken(f, ch, nil), "challenge", ch))
	f.Add("GET", "apple", `{}`)
	f.Add("POST", "android/", `{"device_id":1}`)
	f.Fuzz(func(t *testing.T, method, path, body string) {
		if !isTokenString(method) || strings.ContainsAny(path, " \r\n\t#?%") {
			return
		}
		r := httptest.NewRequest("GET", "/", strings.NewReader(body))
		r.Method = method
		r.URL.Path = "/v1/attest/" + path
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != 503 || w.Code < 200 {
			t.Fatalf("%s %s -> %d %s", method, r.URL.Path, w.Code, w.Body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s -> %d with a body that is not JSON: %q", method, r.URL.Path, w.Code, w.Body)
		}
	})
}
