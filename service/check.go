package service

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
	"github.com/tollgate-dev/tollgate/streams"
)

// Check runs every check Start makes before it serves, without starting
// anything or touching the network: the configuration (Validate), the
// policy file, the files it names (the ASN database is opened, Apple's
// root read) and the environment variables it names, read through
// cfg.Getenv: the Play Integrity keys (present, non-empty, decodable), the
// device-token key (token_key_env: present, long enough) and,
// in proxy mode, the user-signature key (present, non-empty), and the
// alerting webhooks' secret_env (present, non-empty). It returns
// the policy. `limiter validate` runs it.
func Check(cfg Config) (*policy.Policy, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := policy.Default()
	if cfg.ConfigPath != "" {
		var err error
		if p, err = policy.Load(cfg.ConfigPath); err != nil {
			return nil, err
		}
	}
	if err := checkPolicy(cfg, p); err != nil {
		return nil, err
	}
	if err := checkASNDatabase(p, ""); err != nil {
		return nil, err
	}
	return p, nil
}

// checkPolicy runs the checks of p that need the limiter's configuration
// and environment: the user-signature key in proxy mode, the concurrency
// limits' release path, the alerting secrets and the attestation
// settings. The limiter runs it at start (Check) and on every reload (its
// holder's Check), so a reload refuses what a start refuses.
func checkPolicy(cfg Config, p *policy.Policy) error {
	if err := checkUserKey(cfg, p); err != nil {
		return err
	}
	if err := checkConcurrency(cfg, p); err != nil {
		return err
	}
	if err := alertingCheck(cfg.Getenv)(p); err != nil {
		return err
	}
	if _, _, _, err := attestationFromPolicy(p, cfg.Getenv); err != nil {
		return err // the running limiter refuses to start on the same
	}
	return nil
}

// checkASNDatabase opens and closes the ASN database p names, unless it
// is inUse (the one in force, which the ASN watcher keeps).
func checkASNDatabase(p *policy.Policy, inUse string) error {
	rep := p.Risk.Reputation
	if rep == nil || rep.ASNDatabase == "" || rep.ASNDatabase == inUse {
		return nil
	}
	db, err := reputation.OpenDB(rep.ASNDatabase)
	if err != nil {
		return err
	}
	return db.Close()
}

// checkUserKey refuses proxy mode with a policy whose
// identity.user_signature_key_env names only empty variables: every user
// header would fail its signature and be stripped, making all traffic
// silently unauthenticated. In a list (key rotation) an empty variable
// is allowed while another holds a key: the next key may be staged.
func checkUserKey(cfg Config, p *policy.Policy) error {
	if cfg.Upstream == "" || p.Identity.UserSignatureKeyEnv == "" {
		return nil
	}
	names := p.Identity.UserSignatureKeyEnvs
	if len(names) == 0 {
		names = []string{p.Identity.UserSignatureKeyEnv}
	}
	for _, name := range names {
		if cfg.Getenv(name) != "" {
			return nil
		}
	}
	where := "the built-in policy: "
	if p.Source != "" {
		where = fmt.Sprintf("%s:%d: ", p.Source, p.Identity.UserSignatureKeyEnvLine)
	}
	return fmt.Errorf("%sidentity.user_signature_key_env: proxy mode: environment variable %s is empty: no user header could be verified; set it, or remove user_signature_key_env to trust the header unsigned",
		where, strings.Join(names, ", "))
}

// policyLabel names the policy in messages.
func policyLabel(path string) string {
	if path == "" {
		return "the built-in policy"
	}
	return path
}

// dialRedisOnce pings Redis once at start and logs a failure with its
// cause (a refused dial, NOAUTH, a TLS error): the daemon still starts
// and the policy's failure modes apply until Redis answers.
func dialRedisOnce(ctx context.Context, log *slog.Logger, rc redis.UniversalClient, url, consequence string) {
	ctx, cancel := context.WithTimeout(ctx, startDialTimeout)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		log.Error("redis unreachable at start; "+consequence, "redis", RedactURL(url), "err", err.Error())
		return
	}
	log.Info("redis reachable", "redis", RedactURL(url))
}

// dialNATSOnce connects to NATS once at start (streams.Dial) and logs a
// failure with its cause; it reports whether NATS answered.
func dialNATSOnce(log *slog.Logger, url, consequence string, auth streams.Auth) bool {
	if err := streams.Dial(url, startDialTimeout, auth.Options()...); err != nil {
		log.Error("nats unreachable at start; "+consequence, "nats", streams.RedactURL(url), "err", err.Error())
		return false
	}
	return true
}
