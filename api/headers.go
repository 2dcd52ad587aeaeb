package api

import "github.com/tollgate-dev/tollgate/internal/render"

// The rate-limit response fields in the contract's spelling
// (render.HeaderLimit and the rest: net/http's Header.Set and Add would
// canonicalise them, so Tollgate writes these keys into the header map
// directly, and a handler's own header map must be indexed with them).
const (
	HeaderLimit     = render.HeaderLimit
	HeaderRemaining = render.HeaderRemaining
	HeaderReset     = render.HeaderReset
	HeaderDegraded  = render.HeaderDegraded
	HeaderRateLimit = render.HeaderRateLimit
	HeaderPolicy    = render.HeaderPolicy
)

// LimitHeaders lists the rate-limit fields above, for code that copies or
// strips them.
var LimitHeaders = render.LimitHeaders
