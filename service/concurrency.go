package service

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/policy"
)

// checkConcurrency refuses a policy with a concurrency limit when the
// Envoy rate-limit service (--grpc-listen) serves it: Envoy never says
// when a request ends, so a slot taken there could never be released,
// only expire (7.4). Start, reloads and `limiter validate` run it.
func checkConcurrency(cfg Config, p *policy.Policy) error {
	l := p.FirstConcurrency()
	if cfg.GRPCListen == "" || l == nil {
		return nil
	}
	return fmt.Errorf("%s:%d: limit %q is a concurrency limit, which the Envoy rate-limit service (--grpc-listen) cannot serve: Envoy never says when a request ends, so its slot could not be released; serve it through proxy mode or the check API (POST /v1/release), or run without --grpc-listen",
		policyLabel(cfg.ConfigPath), l.Line, l.Name)
}
