package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 12 * time.Hour

// CookieName is the session cookie's name.
const CookieName = "tollgate_console"

// maxSessions bounds the sessions held at once.
const maxSessions = 1000

// Options configures a Console.
type Options struct {
	// AdminToken is the admin API's token; "" turns the console off
	// (every path answers 404).
	AdminToken string
	// API is the admin API's handler (*api.Server): every read and change
	// of the console is a request to it, in process, with AdminToken
	// (required with AdminToken).
	API http.Handler
	// CheckToken checks a token given on the sign-in form as the admin API
	// checks its bearer token, counting a wrong one in its failed-token
	// throttle (api.Server.CheckAdminToken; required with AdminToken). It
	// reports true for the right token, else false with how long the
	// address stays blocked (0: merely wrong).
	CheckToken func(r *http.Request, token string) (time.Duration, bool)
	// SignedIn marks the context of a signed-in session's calls to API
	// (api.SignedIn), so the throttle that blocks its address for wrong
	// tokens others sent does not refuse them: the session is no guess
	// (nil: none, and a throttled address's session is refused too).
	SignedIn func(context.Context) context.Context
	// ForwardedTLS reports whether a request came over TLS to a trusted
	// proxy in front of the limiter (api.Server.ForwardedTLS): the session
	// cookie is Secure then too (nil: only over the limiter's own TLS).
	ForwardedTLS func(*http.Request) bool
	// Counters supplies the overview's decision counts (nil: none shown).
	Counters *Counters
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives errors (default: discard).
	Logger *slog.Logger
}

// Console serves /console/. Its zero value is not usable; use New.
type Console struct {
	o        Options
	mux      *http.ServeMux
	sessions *sessions
	pages    map[string]*template.Template
	static   http.Handler
}

// New returns a Console, validating o.
func New(o Options) (*Console, error) {
	if o.AdminToken != "" && (o.API == nil || o.CheckToken == nil) {
		return nil, errors.New("console: an admin API handler and a token check are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Console{o: o, mux: http.NewServeMux(), sessions: newSessions(maxSessions)}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.static = http.StripPrefix("/console/static/", http.FileServerFS(sub))
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	c.mux.Handle("GET /console/static/", c.static)
	c.mux.HandleFunc("GET /console/signin", c.handleSignInForm)
	c.mux.HandleFunc("POST /console/signin", c.handleSignIn)
	c.mux.HandleFunc("POST /console/signout", c.change(c.handleSignOut))
	c.mux.HandleFunc("GET /console/{$}", c.page(c.handleOverview))
	c.mux.HandleFunc("GET /console/lockouts", c.page(c.handleLockouts))
	c.mux.HandleFunc("POST /console/lockouts/lift", c.change(c.handleLift))
	c.mux.HandleFunc("POST /console/attestations/forget", c.change(c.handleForgetAttestation))
	c.mux.HandleFunc("POST /console/trusted-devices/revoke", c.change(c.handleRevokeTrust))
	c.mux.HandleFunc("GET /console/multipliers", c.page(c.handleMultipliers))
	c.mux.HandleFunc("POST /console/multipliers/set", c.change(c.handleSetMultiplier))
	c.mux.HandleFunc("POST /console/multipliers/clear", c.change(c.handleClearMultiplier))
	c.mux.HandleFunc("GET /console/offenders", c.page(c.handleOffenders))
	c.mux.HandleFunc("GET /console/subjects", c.page(c.handleSubjects))
	c.mux.HandleFunc("GET /console/audit", c.page(c.handleAudit))
	c.mux.HandleFunc("GET /console/alerts", c.page(c.handleAlerts))
	c.mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", view{Title: "Not found", Message: "There is no page at " + r.URL.Path + "."})
	})
}

// ServeHTTP serves the console: 404 without an admin token; every
// answer carries the security headers (7.3).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // "no-referrer" makes Chromium send "Origin: null"
	if c.o.AdminToken == "" {
		http.Error(w, "404 page not found: the console is off (no admin token configured)", http.StatusNotFound)
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/console/static/") {
		h.Set("Cache-Control", "no-store")
	}
	c.mux.ServeHTTP(w, r)
}

// cookieValue returns the session cookie's value ("" when none).
func cookieValue(r *http.Request) string {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return ""
	}
	return ck.Value
}

// setCookie sets (or, with maxAge < 0, deletes) the session cookie:
// HttpOnly, SameSite=Strict, Secure over TLS (the limiter's own, or a
// trusted proxy's: Options.ForwardedTLS), scoped to /console/.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, expires time.Time, maxAge int) {
	secure := r.TLS != nil || c.o.ForwardedTLS != nil && c.o.ForwardedTLS(r)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: value, Path: "/console/", Expires: expires, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure})
}

// page wraps a page handler: without a session it sends the browser to
// the sign-in form.
func (c *Console) page(h func(http.ResponseWriter, *http.Request, *view)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := cookieValue(r)
		s, ok := c.sessions.get(id, c.o.Now())
		if !ok {
			http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
			return
		}
		v := &view{CSRF: s.csrf, Flash: s.flash, FlashFailed: s.failed, Now: c.o.Now().UTC(), Path: r.URL.Path}
		h(w, c.signedIn(r), v)
	}
}

// signedIn returns r with its context marked by Options.SignedIn: r's
// session has been checked.
func (c *Console) signedIn(r *http.Request) *http.Request {
	if c.o.SignedIn == nil {
		return r
	}
	return r.WithContext(c.o.SignedIn(r.Context()))
}

// change wraps a change (a POST): it needs a session, a same-origin
// request (when the browser says where it comes from) and the session's
// CSRF token in the form; it then runs h and sends the browser back with
// h's outcome shown once.
func (c *Console) change(h func(r *http.Request, id string) (msg string, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		id := cookieValue(r)
		s, ok := c.sessions.get(id, c.o.Now())
		if !ok {
			c.render(w, r, http.StatusForbidden, "error", view{Title: "Signed out", Message: "Your session has ended. Sign in again, then repeat the change."})
			return
		}
		if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
			c.render(w, r, http.StatusForbidden, "error", view{Title: "Refused", Message: "This change did not come from a console page of this session (missing or wrong CSRF token). Nothing was changed."})
			return
		}
		msg, err := h(c.signedIn(r), id)
		if r.URL.Path == "/console/signout" {
			c.setCookie(w, r, "", time.Unix(0, 0), -1)
			http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
			return
		}
		if err != nil {
			c.sessions.setFlash(id, err.Error(), true)
		} else {
			c.sessions.setFlash(id, msg, false)
		}
		http.Redirect(w, r, backTo(r), http.StatusSeeOther)
	}
}

// sameOrigin reports whether r's Origin header, when present, names the
// host r was sent to.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// backTo is the console page a change returns to: the form's "back"
// field when it is a console path, else the overview.
func backTo(r *http.Request) string {
	b := r.PostFormValue("back")
	clean := path.Clean(b) // as http.Redirect cleans it
	if strings.HasPrefix(b, "/console/") && (clean == "/console" || strings.HasPrefix(clean, "/console/")) && !strings.ContainsFunc(b, unsafeInURL) {
		return b
	}
	return "/console/"
}

// unsafeInURL reports the characters a redirect's path must not hold: a
// backslash or a control character, which browsers drop or turn into "/"
// ("/console/../\t/evil.com", cleaned by http.Redirect to "/\t/evil.com",
// is "//evil.com" to a browser: another site).
func unsafeInURL(c rune) bool { return c == '\\' || c < 0x20 || c == 0x7f }

func (c *Console) handleSignInForm(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.sessions.get(cookieValue(r), c.o.Now()); ok {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "signin", view{Title: "Sign in"})
}

// handleSignIn checks the token of the sign-in form: the right one starts
// a session; a wrong one is answered 401 with the form and counted in the
// admin API's throttle, and a throttled address 429.
func (c *Console) handleSignIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !sameOrigin(r) {
		c.render(w, r, http.StatusForbidden, "signin", view{Title: "Sign in", Message: "Sign in from the console's own page."})
		return
	}
	left, ok := c.o.CheckToken(r, r.PostFormValue("token"))
	switch {
	case left > 0:
		secs := int64((left + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", itoa(secs))
		c.render(w, r, http.StatusTooManyRequests, "signin", view{Title: "Sign in",
			Message: "Too many wrong tokens from your address. Try again in " + itoa(secs) + " s."})
		return
	case !ok:
		c.o.Logger.Warn("console: wrong admin token on the sign-in form", "remote_addr", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "signin", view{Title: "Sign in", Message: "That is not the admin token."})
		return
	}
	if old := cookieValue(r); old != "" {
		c.sessions.drop(old) // the session this browser held ends: its cookie is replaced
	}
	now := c.o.Now()
	exp := now.Add(SessionTTL)
	c.setCookie(w, r, c.sessions.create(now, exp), exp, int(SessionTTL/time.Second))
	c.o.Logger.Info("console: signed in", "remote_addr", r.RemoteAddr)
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (c *Console) handleSignOut(r *http.Request, id string) (string, error) {
	c.sessions.drop(id)
	return "", nil
}
