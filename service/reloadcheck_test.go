package service

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReloadRefusesWhatStartRefuses: a reloaded policy passes every check
// a start runs (service.Check), or it is refused and the policy in force
// stays. Before, a reload ran only the concurrency and alerting checks: a
// proxy-mode policy whose user_signature_key_env names an empty variable,
// refused at start (6.8) because no user header could then be verified,
// was put in force on reload (counted ok), and every signed user header
// was stripped, all traffic silently unauthenticated; a policy whose
// Play Integrity keys are missing went in force with the old attestation
// settings, also counted ok.
func TestReloadRefusesWhatStartRefuses(t *testing.T) {
	t.Parallel()
	users := make(chan string, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { users <- r.Header.Get("X-User-Id") }))
	t.Cleanup(up.Close)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policyWith := func(keyEnv, extra string) string {
		return "version: 1\nidentity:\n  user_header: X-User-Id\n  user_signature_header: X-User-Signature\n  user_signature_key_env: " + keyEnv +
			"\nlimits:\n  - {name: per-ip, by: [ip], rate: 1000/min}\n" + extra
	}
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(policyWith("TOLLGATE_USER_KEY", ""))
	r, _ := start(t, Config{ConfigPath: path, Upstream: up.URL, WatchInterval: 20 * time.Millisecond})
	api := "http://" + r.APIAddr
	mac := hmac.New(sha256.New, []byte("test-user-key"))
	mac.Write([]byte("u1"))
	sig := hex.EncodeToString(mac.Sum(nil))
	userSeen := func() string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+r.Addr+"/items", nil)
		req.Header.Set("X-User-Id", "u1")
		req.Header.Set("X-User-Signature", sig)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("proxied GET: %s", resp.Status)
		}
		return <-users
	}
	if u := userSeen(); u != "u1" {
		t.Fatalf("upstream got user %q, want u1", u)
	}
	refused := func(n string) func() string {
		return func() string {
			if _, m := get(t, api+"/metrics"); !strings.Contains(m, `tollgate_policy_reloads_total{result="error"} `+n) {
				return "reload not refused (" + n + "): " + grepLine(m, "tollgate_policy_reloads_total")
			}
			return ""
		}
	}
	// The signing key's variable is empty in this environment.
	write(policyWith("TOLLGATE_TEST_UNSET_USER_KEY_5d2", ""))
	eventually(t, 5*time.Second, refused("1"))
	if u := userSeen(); u != "u1" {
		t.Fatalf("after the refused reload the upstream got user %q, want u1 (the signed user)", u)
	}
	// Play Integrity keys whose variables are empty.
	write(policyWith("TOLLGATE_USER_KEY", "risk:\n  attestation:\n    android: {package_name: com.example.app, decryption_key_env: TOLLGATE_TEST_UNSET_PI_DEC_5d2, verification_key_env: TOLLGATE_TEST_UNSET_PI_VER_5d2}\n"))
	eventually(t, 5*time.Second, refused("2"))
	if _, m := get(t, api+"/metrics"); strings.Contains(m, `tollgate_policy_reloads_total{result="ok"} 1`) {
		t.Fatalf("a refused file counted as a reload: %s", grepLine(m, "tollgate_policy_reloads_total"))
	}
}

// grepLine returns the lines of text that contain s.
func grepLine(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}
