package service

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/policy"
)

// checkConcurrency refuses a policy with a concurrency limit when the
// Envoy rate-limit service (--grpc-listen) or forward auth (on unless
// --no-forward-auth) serves it: neither Envoy nor a forward-auth gateway
// says when a request ends, so a slot taken there could never be
// released, only expire (7.4). Forward auth reaches every route, so any
// concurrency limit is refused while it is on. Start, reloads and
// `limiter validate` run it.
func checkConcurrency(cfg Config, p *policy.Policy) error {
	l := p.FirstConcurrency()
	if l == nil {
		return nil
	}
	if !cfg.NoForwardAuth && cfg.GRPCListen == "" {
		return fmt.Errorf("%s:%d: limit %q is a concurrency limit, which forward auth (/v1/forward-auth) cannot serve: a gateway never says when the request it asked about ends, so its slot could not be released; run with --no-forward-auth (forward auth off: /v1/forward-auth answers 404) and serve the limit through proxy mode or the check API (POST /v1/release)",
			policyLabel(cfg.ConfigPath), l.Line, l.Name)
	}
	if cfg.GRPCListen == "" {
		return nil
	}
	return fmt.Errorf("%s:%d: limit %q is a concurrency limit, which the Envoy rate-limit service (--grpc-listen) cannot serve: Envoy never says when a request ends, so its slot could not be released; serve it through proxy mode or the check API (POST /v1/release), or run without --grpc-listen",
		policyLabel(cfg.ConfigPath), l.Line, l.Name)
}
