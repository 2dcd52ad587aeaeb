package service

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/api"
	"github.com/tollgate-dev/tollgate/attestation"
	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// attestState serves the attestation endpoints with the verifiers of the
// policy in force: rebuilt on policy reload (a reload whose keys or root
// cannot be read keeps the previous verifiers), sharing one challenge and
// device store.
type attestState struct {
	log        *slog.Logger
	store      bucket.Admin
	prefix     string
	challenges attestation.Challenges
	devices    attestation.Devices
	handler    atomic.Pointer[http.Handler]
	getenv     func(string) string // reads the Play Integrity keys (default os.Getenv)
}

func newAttestState(log *slog.Logger, store bucket.Admin, rc redis.UniversalClient, prefix string) *attestState {
	a := &attestState{log: log, store: store, prefix: prefix, getenv: os.Getenv}
	if rc != nil {
		a.challenges = attestation.NewRedisChallenges(rc, prefix)
		a.devices = attestation.NewRedisDevices(rc, prefix)
	} else {
		a.challenges = attestation.NewMemoryChallenges(0)
		a.devices = attestation.NewMemoryDevices(0, time.Now)
	}
	return a
}

// apply builds the handler for p.
func (a *attestState) apply(p *policy.Policy) error {
	o := api.AttestOptions{Challenges: a.challenges, Devices: a.devices, Store: a.store, Prefix: a.prefix, Logger: a.log}
	if pa := p.Risk.Attestation; pa != nil {
		apple, play, err := attestation.FromPolicy(pa, a.getenv)
		if err != nil {
			return err // attestation's errors name their package, file or variable
		}
		o.Apple, o.Play, o.VerifiedMultiplier, o.ValidFor = apple, play, pa.VerifiedMultiplier, pa.ValidFor
	}
	h := api.NewAttestHandler(o)
	a.handler.Store(&h)
	return nil
}

// ServeHTTP serves the attestation endpoints of the policy in force.
func (a *attestState) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*a.handler.Load()).ServeHTTP(w, r)
}

// view is the admin API's attestation of a device.
func (a *attestState) view(ctx context.Context, id string) (any, bool, error) {
	v, err := api.AttestationView(ctx, a.devices, id)
	if err != nil || v == nil {
		return nil, false, err
	}
	st, ok, err := a.devices.Get(ctx, id)
	if err != nil {
		return v, false, err
	}
	return v, ok && st.Valid(time.Now()), nil
}
