package service

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

// shippedNATS starts nats-server with deploy/nats/nats-server.conf (the
// one docs/deploy.md ships) and returns it with the URL of each user.
func shippedNATS(t *testing.T) (ns *testenv.NATSServer, url func(user string) string) {
	t.Helper()
	ns = testenv.StartNATSConfig(t, "../deploy/nats/nats-server.conf", "TOLLGATE_NATS_STORE_DIR="+t.TempDir(),
		"TOLLGATE_NATS_LIMITER_PASSWORD=limiter-pw", "TOLLGATE_NATS_RISKD_PASSWORD=riskd-pw", "TOLLGATE_NATS_ALERTS_PASSWORD=alerts-pw")
	return ns, func(user string) string {
		return strings.Replace(ns.URL, "nats://", "nats://"+user+":"+user+"-pw@", 1)
	}
}

// permissionErrors connects as url and collects the server's permission
// violations of the connection.
func permissionErrors(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, func() string) {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	nc, err := nats.Connect(url, append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(errs, "; ") }
}

// TestShippedNATSPermissions (7.5): with the shipped nats-server
// configuration in force, the limiter and riskd work with their users
// (three failed logins lock the account, and the alert reaches the
// alerts user), while riskd's and the alerts user's connections are
// refused publishing a report or an audit event, the limiter's and the
// alerts user's publishing an alert, and a client without a password
// cannot connect at all.
func TestShippedNATSPermissions(t *testing.T) {
	t.Parallel()
	_, url := shippedNATS(t)
	_, keyPrefix := testenv.Redis(t)
	policyPath := writePolicy(t, loopPolicy)
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: url("limiter"), KeyPrefix: keyPrefix})
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := StartRiskd(ctx, RiskdConfig{ConfigPath: policyPath, Listen: "127.0.0.1:0", RedisURL: redisURL, NATSURL: url("riskd"),
		KeyPrefix: keyPrefix, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-rr.Done }()
	alerts := watchAlerts(t, url("alerts"), "tollgate.")
	reportFailedLogins(t, base, "grace", 3)
	testenv.Eventually(t, 10*time.Second, func() string {
		if !loginLocked(t, base, "grace") {
			return "grace not locked: the limiter or riskd cannot work with its NATS user"
		}
		if alerts.kinds()["lockout:grace"] != 1 {
			return "the alerts user has not seen the lockout alert"
		}
		return ""
	})
	// only the limiter publishes reports and audit events, only riskd
	// alerts and its trust journal (which it reads back as enrolments)
	journal := streams.TrustSubject("tollgate.", "grace", "phone")
	for user, subjects := range map[string][]string{
		"riskd":   {"tollgate.reports.login_failed", "tollgate.audit.multiplier_set"},
		"alerts":  {"tollgate.reports.login_failed", "tollgate.audit.multiplier_set", "tollgate.alerts.lockout", journal},
		"limiter": {"tollgate.alerts.lockout", journal},
	} {
		nc, violations := permissionErrors(t, url(user))
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for _, subj := range subjects {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Publish(pctx, subj, []byte(`{"v":1}`))
			pcancel()
			if err == nil {
				t.Fatalf("%s published to %s", user, subj)
			}
			testenv.Eventually(t, 5*time.Second, func() string {
				if !strings.Contains(violations(), `Permissions Violation for Publish to "`+subj+`"`) {
					return user + ": no permission violation for " + subj + ": " + violations()
				}
				return ""
			})
		}
	}
	_, err = nats.Connect(strings.Replace(url("x"), "x:x-pw@", "", 1))
	if !errors.Is(err, nats.ErrAuthorization) && (err == nil || !strings.Contains(err.Error(), "Authorization Violation")) {
		t.Fatalf("a client without a password connected: %v", err)
	}
}

// credsUsers are the limiter's and riskd's NATS users in operator mode,
// with the permissions docs/deploy.md gives them with nsc.
var credsUsers = []testenv.NATSUser{
	{Name: "limiter", PubAllow: []string{"tollgate.decisions.>", "tollgate.reports.>", "tollgate.audit.>", "$JS.API.>", "$JS.ACK.>"},
		PubDeny: jsDeny, SubAllow: []string{"_INBOX.>"}},
	{Name: "riskd", PubAllow: []string{"tollgate.alerts.>", "tollgate.trust.>", "$JS.API.>", "$JS.ACK.>"}, PubDeny: jsDeny, SubAllow: []string{"_INBOX.>"}},
}

// jsDeny is what neither daemon may do to a stream.
var jsDeny = []string{"$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>"}

// TestNATSCreds (7.5): against a nats-server in operator mode (JWT
// accounts, a memory resolver: testenv.StartNATSOperator), a limiter and
// riskd given --nats-creds files of users with the permissions
// docs/deploy.md gives them work: a /v1/report answered 202 and a
// decision land in their streams, and three failed logins lock the
// account. riskd's credentials cannot publish a report; a client without
// credentials, or with those of an account the server does not trust,
// cannot connect.
func TestNATSCreds(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATSOperator(t, credsUsers...)
	_, keyPrefix := testenv.Redis(t)
	policyPath := writePolicy(t, loopPolicy)
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: ns.URL, NATSCreds: ns.Creds["limiter"], KeyPrefix: keyPrefix})
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := StartRiskd(ctx, RiskdConfig{ConfigPath: policyPath, Listen: "127.0.0.1:0", RedisURL: redisURL, NATSURL: ns.URL, NATSCreds: ns.Creds["riskd"],
		KeyPrefix: keyPrefix, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-rr.Done }()

	nc, violations := permissionErrors(t, ns.URL, nats.UserCredentials(ns.Creds["riskd"]))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// last is the data of the last message on subject in stream, or "".
	last := func(stream, subject string) string {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return ""
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return ""
		}
		return string(m.Data)
	}
	reportFailedLogins(t, base, "heidi", 3)
	testenv.Eventually(t, 10*time.Second, func() string {
		if r := last("TOLLGATE_EVENTS", "tollgate.reports.login_failed"); !strings.Contains(r, `"account":"heidi"`) {
			return "the report answered 202 is not in the events stream: " + r
		}
		if !loginLocked(t, base, "heidi") {
			return "heidi not locked: the limiter or riskd cannot work with its credentials"
		}
		if d := last("TOLLGATE_DECISIONS", "tollgate.decisions.auth"); !strings.Contains(d, "heidi") {
			return "no decision of heidi's login check in the decisions stream: " + d
		}
		return ""
	})
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = js.Publish(pctx, "tollgate.reports.login_failed", []byte(`{"v":1}`))
	pcancel()
	if err == nil {
		t.Fatal("riskd's credentials published a report")
	}
	testenv.Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(violations(), `Permissions Violation for Publish to "tollgate.reports.login_failed"`) {
			return "no permission violation for riskd's report: " + violations()
		}
		return ""
	})
	for name, opts := range map[string][]nats.Option{"no credentials": nil, "an untrusted account's": {nats.UserCredentials(ns.OtherCreds)}} {
		nc, err := nats.Connect(ns.URL, opts...)
		if err == nil {
			nc.Close()
			t.Errorf("a client with %s connected", name)
		} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(err.Error(), "Authorization Violation") {
			t.Errorf("a client with %s: %v, want an authorization error", name, err)
		}
	}
}

// TestNATSTLSDaemons (7.5): a limiter and riskd given a tls:// URL with a
// user and password and --nats-ca reach a nats-server that speaks only
// TLS and requires the password: three failed logins reported to the
// limiter lock the account (through riskd). (streams' TestNATSTLS: the
// refusals without the CA or the password.)
func TestNATSTLSDaemons(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATSTLS(t, "limiter", "s3cret")
	url := ns.TLSURL("limiter", "s3cret")
	_, keyPrefix := testenv.Redis(t)
	policyPath := writePolicy(t, loopPolicy)
	redisURL := "redis://" + testenv.RedisAddr() + "/0"
	_, base := start(t, Config{ConfigPath: policyPath, RedisURL: redisURL, NATSURL: url, NATSCA: ns.CA, KeyPrefix: keyPrefix})
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := StartRiskd(ctx, RiskdConfig{ConfigPath: policyPath, Listen: "127.0.0.1:0", RedisURL: redisURL, NATSURL: url, NATSCA: ns.CA,
		KeyPrefix: keyPrefix, DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-rr.Done }()
	reportFailedLogins(t, base, "tls-user", 3)
	testenv.Eventually(t, 10*time.Second, func() string {
		if !loginLocked(t, base, "tls-user") {
			return "tls-user not locked: the limiter or riskd cannot work over TLS NATS"
		}
		return ""
	})
}
