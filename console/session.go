package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// session is one signed-in browser.
type session struct {
	csrf    string    // echoed by every change (a form field)
	expires time.Time // fixed at sign-in: no sliding renewal
	flash   string    // the outcome of the last change, shown once
	failed  bool      // flash reports a failure
}

// sessions holds the signed-in sessions by the SHA-256 of their cookie
// value, at most max: when full, the one ending first goes. Safe for
// concurrent use.
type sessions struct {
	mu  sync.Mutex
	by  map[[32]byte]*session
	max int
}

func newSessions(max int) *sessions {
	return &sessions{by: make(map[[32]byte]*session), max: max}
}

// randomToken returns 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session ending at expires and returns its cookie value.
func (s *sessions) create(now, expires time.Time) string {
	id := randomToken()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.by) >= s.max {
		var first [32]byte
		var end time.Time
		for k, v := range s.by {
			if !v.expires.After(now) {
				delete(s.by, k)
				continue
			}
			if end.IsZero() || v.expires.Before(end) {
				first, end = k, v.expires
			}
		}
		if len(s.by) >= s.max {
			delete(s.by, first)
		}
	}
	s.by[sha256.Sum256([]byte(id))] = &session{csrf: randomToken(), expires: expires}
	return id
}

// get returns a copy of the session of cookie value id in force at now
// (ok false when none), and takes its flash.
func (s *sessions) get(id string, now time.Time) (session, bool) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.by[k]
	if v == nil {
		return session{}, false
	}
	if !v.expires.After(now) {
		delete(s.by, k)
		return session{}, false
	}
	out := *v
	v.flash, v.failed = "", false
	return out, true
}

// setFlash records the outcome of a change, for the next page shown.
func (s *sessions) setFlash(id, msg string, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.by[sha256.Sum256([]byte(id))]; v != nil {
		v.flash, v.failed = msg, failed
	}
}

// drop ends the session of cookie value id.
func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.by, sha256.Sum256([]byte(id)))
}
