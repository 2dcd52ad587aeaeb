package attack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// lenientUpstream reads a login's account as the frameworks that coerce
// it do: a JSON number as its text (Jackson's default scalar coercion,
// a phone number as the login), a JSON array of one value as that value
// (Rails' find_by(email: params[:email]) is an SQL IN over the array),
// and a form field written as an array, username[] or username[0]
// (Rails, PHP and Express's qs), and the field nested in a user object
// or user[...] form field, as Devise reads it. It counts the attempts
// per account.
type lenientUpstream struct {
	srv      *httptest.Server
	mu       sync.Mutex
	attempts map[string]int
}

func newLenientUpstream(t *testing.T) *lenientUpstream {
	u := &lenientUpstream{attempts: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acct := ""
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			_ = r.ParseForm()
			for _, k := range []string{"username", "username[]", "username[0]", "user[username]"} {
				if v := r.PostForm[k]; len(v) > 0 {
					acct = v[0]
				}
			}
		} else {
			b, _ := io.ReadAll(r.Body)
			var login struct {
				Username json.RawMessage
				User     struct{ Username json.RawMessage }
			}
			_ = json.Unmarshal(b, &login)
			raw := strings.TrimSpace(string(login.Username))
			if raw == "" {
				raw = strings.TrimSpace(string(login.User.Username)) // Devise's params[:user][:username]
			}
			if strings.HasPrefix(raw, "[") {
				var one []json.RawMessage
				if json.Unmarshal([]byte(raw), &one) == nil && len(one) > 0 {
					raw = string(one[0])
				}
			}
			if err := json.Unmarshal([]byte(raw), &acct); err != nil {
				acct = raw // a number, as its text
			}
		}
		u.mu.Lock()
		u.attempts[acct]++
		u.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// Attack: the victim logs in with a phone number, or the upstream finds
// the account by whatever the field holds. The attacker sends the
// account as a JSON number, as a one-value JSON array, or as a form
// array field (username[]=...): the upstream coerces each to the
// victim's account, but the limiter took only a string under the exact
// field name, found none, and login-account (5 a minute) never counted
// the 20 guesses. Devise's login, {"user":{"email":...}} or
// user[email]=..., hid it in a nested field the same way.
// Defence (6.4): the account is read in these shapes too (a number as
// its text, the field in a nested object or user[...] field); an array of several values, or the field given in two
// shapes, names several accounts at once and is refused (400).
func TestAttackAccountShapeEvadesAccountLimit(t *testing.T) {
	t.Parallel()
	up := newLenientUpstream(t)
	tg := start(t, withUpstream(up.srv.URL))
	const form = "application/x-www-form-urlencoded"
	for i, c := range []struct {
		name, victim, body, contentType string
	}{
		{"JSON number", "14155550100", `{"username":14155550100,"password":"guess"}`, "application/json"},
		{"JSON array", "victim-shape-1", `{"username":["victim-shape-1"],"password":"guess"}`, "application/json"},
		{"form array", "victim-shape-2", "username[]=victim-shape-2&password=guess", form},
		{"form indexed array", "victim-shape-3", "username[0]=victim-shape-3&password=guess", form},
		{"JSON nested (Devise)", "victim-shape-4", `{"user":{"username":"victim-shape-4","password":"guess"}}`, "application/json"},
		{"form nested (Devise)", "victim-shape-5", "user[username]=victim-shape-5&user[password]=guess", form},
	} {
		for j := range 20 {
			do(t, "POST", tg.public+"/auth/login", c.body, from(fmt.Sprintf("198.18.32.%d", 20*i+j+1), "Content-Type", c.contentType))
		}
		up.mu.Lock()
		n := up.attempts[c.victim]
		up.mu.Unlock()
		if n > 5 {
			t.Errorf("%s: the upstream took %d of 20 guesses at one account; want at most 5 (login-account, 5/min)", c.name, n)
		}
	}
	for _, c := range []struct{ body, contentType string }{
		{`{"username":["a","b"],"password":"guess"}`, "application/json"},
		{"username[]=a&username[]=b", form},
		{"username=a&username[]=b", form},
		{`{"username":"decoy","user":{"username":"victim"}}`, "application/json"},
	} {
		if code, body := do(t, "POST", tg.public+"/auth/login", c.body, from("198.18.32.99", "Content-Type", c.contentType)); code != http.StatusBadRequest {
			t.Errorf("%s: %d %.160s; want 400 (two accounts in one login)", c.body, code, body)
		}
	}
}
