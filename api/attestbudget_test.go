package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/attestation/attestationtest"
)

// TestAttestBudgetNewIDsOnly: the attestation handler takes the budget
// its Guard hands it (risk.attestation.max_per_ip) for an attestation
// that verified and binds a new device id, on either platform, and for
// nothing else: not a failed one, not a renewal (the same App Attest key,
// or another key or a Play verdict with the id's last device token). A
// denied budget answers for the handler: the id is not recorded.
func TestAttestBudgetNewIDsOnly(t *testing.T) {
	t.Parallel()
	e := newAttEnv(t, attestation.NewMemoryChallenges(0), attestation.NewMemoryDevices(0, func() time.Time { return attNow }))
	var taken []string   // the device id of each budget taken
	var counted []string // endpoint/result/step of each answer counted
	e.h.(*attestHandler).o.Count = func(endpoint, result, step string) {
		counted = append(counted, endpoint+"/"+result+"/"+step)
	}
	deny := false
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var take attestBudget = func(w http.ResponseWriter, rid string) bool {
			taken = append(taken, r.URL.Query().Get("id"))
			if deny {
				writeError(w, rid, &apiError{status: http.StatusTooManyRequests, code: CodeRateLimited, message: "Too many requests"})
			}
			return !deny
		}
		e.h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), attestBudgetKey{}, take)))
	})
	apple := func(id string, o attestationtest.Options, token string) (int, attResponse, *attestationtest.Attested) {
		t.Helper()
		ch := e.challenge(t, id)
		att := e.attest(t, ch, o)
		body := attAppleBody(id, att, ch)
		if token != "" {
			body = strings.TrimSuffix(body, "}") + `,"device_token":"` + token + `"}`
		}
		code, resp := attDo(t, h, "POST", PathAttestApple+"?id="+id, body)
		return code, resp, att
	}
	android := func(id, token string) (int, attResponse) {
		t.Helper()
		ch := e.challenge(t, id)
		return attDo(t, h, "POST", PathAttestAndroid+"?id="+id, attJSON("device_id", id, "token", e.playToken(t, ch, nil), "challenge", ch, "device_token", token))
	}
	check := func(what string, code, want int, taken0 []string) {
		t.Helper()
		if code != want || strings.Join(taken, ",") != strings.Join(taken0, ",") {
			t.Fatalf("%s: %d with budgets of %q, want %d with %q", what, code, taken, want, taken0)
		}
	}

	code, _, _ := apple("bad", attestationtest.Options{Fmt: "none"}, "")
	check("a failed attestation", code, 400, nil)
	code, resp, owner := apple("i1", attestationtest.Options{}, "")
	check("a new apple id", code, 200, []string{"i1"})
	code, _, _ = apple("i1", attestationtest.Options{Key: owner.Key}, "")
	check("its key again", code, 200, []string{"i1"})
	code, _, _ = apple("i1", attestationtest.Options{}, resp.Token)
	check("another key with its token", code, 200, []string{"i1"})
	code, _, _ = apple("i1", attestationtest.Options{}, "")
	check("another key without its token", code, 400, []string{"i1"})

	code, resp = android("a1", "")
	check("a new android id", code, 200, []string{"i1", "a1"})
	code, _ = android("a1", resp.Token)
	check("an android renewal with its token", code, 200, []string{"i1", "a1"})

	deny = true
	code, _ = android("a2", "")
	check("a new id over the budget", code, 429, []string{"i1", "a1", "a2"})
	if v, err := AttestationView(context.Background(), e.devices, "a2"); err != nil || v != nil {
		t.Fatalf("the denied id was recorded: %+v %v", v, err)
	}
	code, _ = attDo(t, h, "POST", PathAttestAndroid, `{"device_id":"a3"}`)
	check("a malformed body", code, 400, []string{"i1", "a1", "a2"})
	want := []string{"apple/failed/format", "apple/verified/", "apple/renewed/", "apple/renewed/", "apple/failed/device",
		"android/verified/", "android/renewed/", "android/limited/", "android/invalid/"}
	if strings.Join(counted, " ") != strings.Join(want, " ") {
		t.Errorf("counted %q, want %q", counted, want)
	}
}

// TestAttestFailureLogThrottled: failed attestations are logged one line
// a second, the next line saying how many were left out (the counter
// counts every one): a flood of forged attestations is no flood of log.
func TestAttestFailureLogThrottled(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	now := attNow
	h := NewAttestHandler(AttestOptions{Apple: attestationtest.NewCA(t, attNow).Apple(attAppID, attestation.EnvironmentProduction),
		Now: func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	forged := func() {
		t.Helper()
		code, ch := attDo(t, h, "POST", PathAttestChallenge, attJSON("device_id", "f1"))
		if code != 200 {
			t.Fatalf("challenge: %d", code)
		}
		body := attJSON("device_id", "f1", "key_id", attB64([]byte("k")), "attestation_object", attB64([]byte("forged")), "challenge", ch.Challenge)
		if code, _ := attDo(t, h, "POST", PathAttestApple, body); code != 400 {
			t.Fatalf("forged attestation: %d, want 400", code)
		}
	}
	for range 5 {
		forged()
	}
	now = now.Add(time.Second)
	forged()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "suppressed=0") || !strings.Contains(lines[1], "suppressed=4") {
		t.Fatalf("6 failures over a second logged:\n%s\nwant 2 lines, the second with suppressed=4", logs.String())
	}
}
