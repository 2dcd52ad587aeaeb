package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/policy"
)

// attestState serves the attestation endpoints with the verifiers of the
// policy in force: rebuilt on policy reload (a reload whose keys or root
// cannot be read keeps the previous verifiers), sharing one challenge and
// device store.
type attestState struct {
	log        *slog.Logger
	prefix     string
	challenges attestation.Challenges
	devices    attestation.Devices
	handler    atomic.Pointer[http.Handler]
	getenv     func(string) string // reads the keys the policy names (default os.Getenv)
	// random is this process's device-token key when the policy names no
	// token_key_env; tokens the verifier in force (6.3).
	random *attestation.Tokens
	tokens atomic.Pointer[attestation.Tokens]
	// count counts the endpoints' answers (api.AttestOptions.Count); nil
	// counts nothing.
	count func(endpoint, result, step string)
}

// countAttestations registers tollgate_attestations_total on reg and
// returns its api.AttestOptions.Count.
func countAttestations(reg prometheus.Registerer) func(endpoint, result, step string) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_attestations_total",
		Help: "Answers of the attestation endpoints (apple, android, assertion) by result (verified: a new device id, renewed, failed at step, limited by max_per_ip, busy, invalid, error).",
	}, []string{"endpoint", "result", "step"})
	reg.MustRegister(c)
	return func(endpoint, result, step string) { c.WithLabelValues(endpoint, result, step).Inc() }
}

func newAttestState(log *slog.Logger, rc redis.UniversalClient, prefix string) *attestState {
	a := &attestState{log: log, prefix: prefix, getenv: os.Getenv, random: attestation.RandomTokens()}
	a.tokens.Store(a.random)
	if rc != nil {
		a.challenges = attestation.NewRedisChallenges(rc, prefix)
		a.devices = attestation.NewRedisDevices(rc, prefix)
	} else {
		a.challenges = attestation.NewMemoryChallenges(0)
		a.devices = attestation.NewMemoryDevices(0, time.Now)
	}
	return a
}

// attestationFromPolicy builds the verifiers and the device-token key of
// p's risk.attestation (none without it) from the files and environment
// variables it names, as the start and `limiter validate` both do. Every
// error begins with the policy's FILE:LINE and the field, and all are
// reported at once.
func attestationFromPolicy(p *policy.Policy, getenv func(string) string) (*attestation.Apple, *attestation.Play, *attestation.Tokens, error) {
	pa := p.Risk.Attestation
	if pa == nil {
		return nil, nil, nil, nil
	}
	apple, play, err := attestation.FromPolicy(p.Source, pa, getenv)
	t, terr := attestation.TokensFromPolicy(pa.TokenKeyEnv, getenv)
	if terr != nil {
		terr = fmt.Errorf("%s:%d: risk.attestation.token_key_env: %w", p.Source, pa.TokenKeyEnvLine, terr)
	}
	if err != nil || terr != nil {
		return nil, nil, nil, errors.Join(err, terr)
	}
	return apple, play, t, nil
}

// apply builds the handler and the device-token verifier for p.
func (a *attestState) apply(p *policy.Policy) error {
	tokens := a.random
	o := api.AttestOptions{Challenges: a.challenges, Devices: a.devices, Logger: a.log, Count: a.count}
	if pa := p.Risk.Attestation; pa != nil {
		apple, play, t, err := attestationFromPolicy(p, a.getenv)
		if err != nil {
			return err // FILE:LINE, the field, the file or variable
		}
		if t != nil {
			tokens = t
		} else if apple != nil || play != nil {
			a.log.Warn("risk.attestation.token_key_env is not set: device tokens are signed with a random key of this process and verify only on this limiter until it restarts; set it when several limiters serve one app")
		}
		o.Apple, o.Play, o.ValidFor, o.HoldFor = apple, play, pa.ValidFor, pa.TrustedFor
	}
	o.Tokens = tokens
	h := api.NewAttestHandler(o)
	a.handler.Store(&h)
	a.tokens.Store(tokens)
	return nil
}

// Tokens returns the device-token verifier in force.
func (a *attestState) Tokens() *attestation.Tokens { return a.tokens.Load() }

// ServeHTTP serves the attestation endpoints of the policy in force.
func (a *attestState) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*a.handler.Load()).ServeHTTP(w, r)
}

// forget drops a device's attestation for the admin API.
func (a *attestState) forget(ctx context.Context, id string) (bool, error) {
	return a.devices.Forget(ctx, id)
}

// view is the admin API's attestation of a device (the admin view judges
// whether it is in force, by the store's clock).
func (a *attestState) view(ctx context.Context, id string) (any, error) {
	return api.AttestationView(ctx, a.devices, id)
}
