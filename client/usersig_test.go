package client

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/usersig"
)

func TestUserSignerSigns(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	s := &UserSigner{Key: []byte("k3y"), Now: func() time.Time { return now }}
	h := http.Header{"X-User-Id": {"forged"}, "X-User-Signature": {"forged"}}
	s.Sign(h, "u_42")
	if got := h.Values("X-User-Id"); len(got) != 1 || got[0] != "u_42" {
		t.Errorf("X-User-Id = %q, want [u_42]", got)
	}
	sig := h.Get("X-User-Signature")
	if want := SignUser([]byte("k3y"), "u_42", now); sig != want || sig[:13] != "t=1800000000," {
		t.Errorf("X-User-Signature = %q, want %q", sig, want)
	}
	opts := usersig.Options{RequireTimestamp: true}
	if !usersig.Verify([][]byte{[]byte("k3y")}, "u_42", sig, now.Add(5*time.Minute), opts) {
		t.Errorf("the signature does not verify 5m later")
	}
	if usersig.Verify([][]byte{[]byte("k3y")}, "u_42", sig, now.Add(5*time.Minute+time.Second), opts) {
		t.Errorf("the signature still verifies 5m1s later")
	}
	// other header names
	s = &UserSigner{Key: []byte("k3y"), UserHeader: "X-Uid", SignatureHeader: "X-Uid-Sig", Now: s.Now}
	h = http.Header{}
	s.Sign(h, "u_7")
	if h.Get("X-Uid") != "u_7" || h.Get("X-Uid-Sig") != SignUser([]byte("k3y"), "u_7", now) {
		t.Errorf("custom names: %v", h)
	}
}
