package api

// The rate-limit response fields in the contract's spelling. net/http's
// Header.Set and Add canonicalise a name ("X-Ratelimit-Limit",
// "Ratelimit"), so Tollgate writes these keys into the header map
// directly: on HTTP/1.1 the wire then shows exactly these names (HTTP/2
// lower-cases every name anyway). Field names are case-insensitive, so a
// client matching either spelling works; Go code reading a response that
// crossed the wire finds them with Header.Get as usual, while code reading
// a handler's own header map (an httptest.ResponseRecorder) must index it
// with these keys.
const (
	HeaderLimit     = "X-RateLimit-Limit"
	HeaderRemaining = "X-RateLimit-Remaining"
	HeaderReset     = "X-RateLimit-Reset"
	HeaderDegraded  = "X-RateLimit-Degraded"
	HeaderRateLimit = "RateLimit"
	HeaderPolicy    = "RateLimit-Policy"
)

// LimitHeaders lists the rate-limit fields above, for code that copies or
// strips them.
var LimitHeaders = []string{HeaderLimit, HeaderRemaining, HeaderReset, HeaderRateLimit, HeaderPolicy, HeaderDegraded}
