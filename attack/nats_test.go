package attack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
	"github.com/tollgate-dev/tollgate/streams"
)

// onShippedNATS runs the limiter and riskd on a nats-server of the test's
// own started with deploy/nats/nats-server.conf (7.5), each with its
// user; it returns the setups and an attacker: a JetStream client that
// reached NATS as the alerts user, the only other user the file knows.
func onShippedNATS(t *testing.T) (setup, func(*service.RiskdConfig), jetstream.JetStream) {
	t.Helper()
	ns := testenv.StartNATSConfig(t, "../deploy/nats/nats-server.conf", "TOLLGATE_NATS_STORE_DIR="+t.TempDir(),
		"TOLLGATE_NATS_LIMITER_PASSWORD=limiter-pw", "TOLLGATE_NATS_RISKD_PASSWORD=riskd-pw", "TOLLGATE_NATS_ALERTS_PASSWORD=alerts-pw")
	url := func(user string) string { return strings.Replace(ns.URL, "nats://", "nats://"+user+":"+user+"-pw@", 1) }
	nc, err := nats.Connect(url("alerts"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(ns.URL); err == nil {
		t.Fatal("a client without a password connected to the shipped configuration")
	}
	return func(c *service.Config) {
			c.NATSURL, c.SubjectPrefix, c.StreamName = url("limiter"), streams.DefaultPrefix, streams.DefaultName
		}, func(c *service.RiskdConfig) {
			c.NATSURL, c.SubjectPrefix, c.StreamName = url("riskd"), streams.DefaultPrefix, streams.DefaultName
		}, js
}

// forge publishes v as JSON to subject through js, as an attacker on the
// network would, and fails t when JetStream stores it.
func forge(t *testing.T, js jetstream.JetStream, subject, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subject, []byte(body)); err == nil {
		t.Fatalf("the attacker's %s was stored", subject)
	}
}

// Attack: a client that reached NATS publishes an audit event that sets
// an admin multiplier of 100 on its own address (the red team
// applied one this way).
// Defence (7.5): the shipped nats-server configuration lets only limiters
// publish audit events: the forgery is refused (the audit record holds the
// admin change made after it, not the forgery) and no multiplier is in
// force on the address.
func TestAttackForgedAuditEvent(t *testing.T) {
	t.Parallel()
	onNATS, onRiskd, attacker := onShippedNATS(t)
	tg := startWith(t, onRiskd, onNATS)
	const ip = "203.0.113.66"
	forge(t, attacker, "tollgate.audit.multiplier_set", fmt.Sprintf(
		`{"v":1,"audit_id":"01J0000000000000000000FAKE","ts":%q,"action":"multiplier_set","subject":"ip","id":%q,"value":100}`,
		time.Now().UTC().Format(time.RFC3339Nano), ip))
	// a real admin change after the forgery: the audit record holds it
	// and not the forgery, the only way to riskd
	if code, body := do(t, "PUT", tg.api+"/v1/admin/multipliers/ip/192.0.2.99", `{"multiplier":0.5}`, bearer(adminToken)); code != 200 {
		t.Fatalf("admin multiplier: %d %s", code, body)
	}
	eventually(t, 10*time.Second, func() string {
		if code, body := do(t, "GET", tg.api+"/v1/admin/audit", "", bearer(adminToken)); code != 200 || !strings.Contains(body, "192.0.2.99") {
			return fmt.Sprintf("the admin change is not in the audit record: %d %s", code, body)
		}
		return ""
	})
	tg.syncRisk(t)
	code, body := do(t, "GET", tg.api+"/v1/admin/subjects/ip/"+ip, "", bearer(adminToken))
	if code != 200 || strings.Contains(body, `"value":100`) {
		t.Fatalf("the forged audit event applied a multiplier: %d %s", code, body)
	}
	if code, body := do(t, "GET", tg.api+"/v1/admin/audit", "", bearer(adminToken)); code != 200 || strings.Contains(body, ip) {
		t.Fatalf("the forged audit event is in the audit record: %d %s", code, body)
	}
}

// Attack: a client that reached NATS publishes a report that its phone
// logged in to the victim's account with a proven attestation, to make
// the phone a trusted device of the account (exempt from its lockouts).
// Defence (7.5): only limiters may publish reports: the forgery is
// refused, and riskd, which has processed every report since (syncRisk),
// did not enroll the phone.
func TestAttackForgedReportEnrollsNoDevice(t *testing.T) {
	t.Parallel()
	onNATS, onRiskd, attacker := onShippedNATS(t)
	tg := startWith(t, onRiskd, onNATS)
	forge(t, attacker, "tollgate.reports.login_succeeded", fmt.Sprintf(
		`{"v":1,"id":"forged-1","ts":%q,"type":"login_succeeded","source":"api","account":"victim","device_id":"attacker-phone","attested":true}`,
		time.Now().UTC().Format(time.RFC3339Nano)))
	tg.syncRisk(t)
	// the trust set scores each device by its end: no score, not trusted
	if end, err := tg.rdb.ZScore(context.Background(), bucket.TrustKey(tg.prefix, "account", "victim"), "attacker-phone").Result(); err != redis.Nil {
		t.Fatalf("the forged report enrolled the attacker's phone as a trusted device of victim (until %v, %v)", time.UnixMicro(int64(end)), err)
	}
}
