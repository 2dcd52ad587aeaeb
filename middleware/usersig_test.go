package middleware

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/usersig"
)

func TestSignUser(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	mw, err := SignUser(SignUserOptions{Key: []byte("k3y"), Now: func() time.Time { return now },
		User: func(r *http.Request) string { return r.URL.Query().Get("session") }})
	if err != nil {
		t.Fatal(err)
	}
	var got http.Header
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	for _, c := range []struct{ query, user string }{{"?session=u_42", "u_42"}, {"", ""}} {
		r := httptest.NewRequest("GET", "/feed"+c.query, nil)
		r.Header["X-User-Id"] = []string{"victim"}
		r.Header["X_user_id"] = []string{"victim"}
		r.Header["X-User-Signature"] = []string{"forged"}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if c.user == "" {
			if len(got) != 0 {
				t.Errorf("anonymous: headers %v left; want the client's user headers removed", got)
			}
			continue
		}
		if len(got) != 2 || got.Get("X-User-Id") != c.user {
			t.Errorf("headers %v; want only X-User-Id %s and its signature", got, c.user)
		}
		if !usersig.Verify([][]byte{[]byte("k3y")}, c.user, got.Get("X-User-Signature"), now, usersig.Options{RequireTimestamp: true}) {
			t.Errorf("X-User-Signature %q does not verify", got.Get("X-User-Signature"))
		}
	}
	if _, err := SignUser(SignUserOptions{User: func(*http.Request) string { return "" }}); err != ErrSignUser {
		t.Errorf("no key: %v, want ErrSignUser", err)
	}
}
