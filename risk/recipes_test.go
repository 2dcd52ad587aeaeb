package risk_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/engine"
	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/risk"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

// recipe runs one policy of docs/recipes.md (7.4) the way riskd and the
// limiter do: reports through the signals engine, its actions written to
// real Redis by risk.WriteAction, checks decided by the engine there.
type recipe struct {
	t     *testing.T
	p     *policy.Policy
	sig   *signals.Engine
	store *bucket.RedisStore
	eng   *engine.Engine
	now   time.Time
	seq   uint64
}

// loadRecipe loads testdata/recipes/NAME.yaml, which docs/recipes.md must
// quote whole.
func loadRecipe(t *testing.T, name string) *recipe {
	t.Helper()
	path := filepath.Join("..", "testdata", "recipes", name+".yaml")
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "recipes.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(text)+"```") {
		t.Fatalf("docs/recipes.md does not quote %s as it is", path)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c, prefix := testenv.Redis(t)
	store := bucket.NewRedisStore(c, bucket.RedisOptions{Prefix: prefix, Timeout: 5 * time.Second})
	t.Cleanup(func() { store.Close() })
	eng, err := engine.New(engine.Options{Store: store, Policy: func() *policy.Policy { return p }})
	if err != nil {
		t.Fatal(err)
	}
	return &recipe{t: t, p: p, sig: signals.New(signals.Options{Risk: p.Risk, Limits: p.Limits}), store: store, eng: eng, now: time.Now()}
}

// report applies n reports of type typ (set fills in the i-th one's
// subjects), writes their actions to Redis and returns their alerts.
func (r *recipe) report(n int, typ string, set func(i int, rep *streams.Report)) []streams.Alert {
	r.t.Helper()
	var alerts []streams.Alert
	for i := 0; i < n; i++ {
		r.now = r.now.Add(time.Millisecond)
		r.seq++
		rep := &streams.Report{V: streams.SchemaVersion, Type: typ, TS: r.now}
		set(i, rep)
		for _, a := range r.sig.ApplyReport(r.seq, 0, rep, nil) {
			if a.Kind == signals.Alert {
				alerts = append(alerts, a.Alert)
				continue
			}
			if err := risk.WriteAction(context.Background(), r.store, r.p, &a); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	return alerts
}

// check decides in (cost 1) and returns the outcome, lock scope and the
// effective burst of the named limit (-1 when it did not apply).
func (r *recipe) check(in engine.Input, limit string) (engine.Outcome, string, float64) {
	r.t.Helper()
	in.Cost = 1
	var d engine.Decision
	if err := r.eng.Decide(context.Background(), &in, &d); err != nil {
		r.t.Fatal(err)
	}
	burst := -1.0
	for i, l := range d.Applied() {
		if l.Name == limit && (d.Outcome == engine.Allowed || d.Outcome == engine.Limited) {
			burst = d.LimitResult(i).Burst
		}
	}
	return d.Outcome, d.LockScope, burst
}

// alertOf asserts that alerts hold exactly one alert, of kind on
// (subject, id), and returns it.
func alertOf(t *testing.T, alerts []streams.Alert, kind, subject, id string) {
	t.Helper()
	if len(alerts) != 1 || alerts[0].Kind != kind || alerts[0].Subject != subject || alerts[0].SubjectID != id {
		t.Fatalf("alerts %+v; want one %s on %s %s", alerts, kind, subject, id)
	}
}

// TestRecipeSMSPumping: 50 OTPs to one premium prefix within 10 minutes
// cut that prefix's OTP budget to a twentieth (other prefixes keep
// theirs); 10 from one device ask that device for a step-up on the OTP
// route only.
func TestRecipeSMSPumping(t *testing.T) {
	t.Parallel()
	r := loadRecipe(t, "sms-pumping")
	prefix := func(p string) map[string]string { return map[string]string{"phone_prefix": p} }
	otp := func(device, p string) engine.Input {
		return engine.Input{Endpoint: "POST /otp/send", IP: "192.0.2.1", DeviceID: device, Attributes: prefix(p)}
	}
	if o, _, b := r.check(otp("d0", "4479"), "otp-prefix"); o != engine.Allowed || b != 100 {
		t.Fatalf("before: %v burst %v", o, b)
	}
	alerts := r.report(50, "otp_sent", func(i int, rep *streams.Report) {
		rep.DeviceID, rep.Attributes = "bot-"+itoa(i), prefix("4479")
	})
	alertOf(t, alerts, streams.AlertTighten, "attr:phone_prefix", "4479")
	if o, _, b := r.check(otp("d1", "4479"), "otp-prefix"); o != engine.Allowed || b != 5 {
		t.Errorf("pumped prefix: %v burst %v; want allowed with burst 5 (100 x 0.05)", o, b)
	}
	if o, _, b := r.check(otp("d1", "4420"), "otp-prefix"); o != engine.Allowed || b != 100 {
		t.Errorf("other prefix: %v burst %v; want 100", o, b)
	}
	alerts = r.report(10, "otp_sent", func(i int, rep *streams.Report) {
		rep.DeviceID, rep.Attributes = "farm-phone", prefix("44"+itoa(10+i))
	})
	alertOf(t, alerts, streams.AlertStepUp, engine.ClaimSubject, "farm-phone") // reports without a device token count as claims (7.1)
	if o, scope, _ := r.check(otp("farm-phone", "4420"), ""); o != engine.StepUp || scope != "device" {
		t.Errorf("device on the OTP route: %v %q; want step_up scope device", o, scope)
	}
	if o, _, _ := r.check(engine.Input{Endpoint: "POST /profile", IP: "192.0.2.1", DeviceID: "farm-phone"}, ""); o != engine.Allowed {
		t.Errorf("device elsewhere: %v; want allowed (the step-up is for classes [otp])", o)
	}
}

// TestRecipeSignupFarms: 100 sign-ups from one ASN in an hour cut its
// sign-up budget to a tenth; 20 from one /24 block it for a day.
func TestRecipeSignupFarms(t *testing.T) {
	t.Parallel()
	r := loadRecipe(t, "signup-farms")
	signup := func(asn, subnet string) engine.Input {
		return engine.Input{Endpoint: "POST /signup", IP: subnet + ".7", ASN: asn, Attributes: map[string]string{"subnet24": subnet}}
	}
	alerts := r.report(100, "signup", func(i int, rep *streams.Report) {
		rep.ASN, rep.IP, rep.Attributes = "64500", "203.0."+itoa(i)+".1", map[string]string{"subnet24": "203.0." + itoa(i)}
	})
	alertOf(t, alerts, streams.AlertTighten, "asn", "64500")
	if o, _, b := r.check(signup("64500", "192.0.2"), "signup-asn"); o != engine.Allowed || b != 20 {
		t.Errorf("farm ASN: %v burst %v; want 20 (200 x 0.1)", o, b)
	}
	if o, _, b := r.check(signup("64501", "192.0.2"), "signup-asn"); o != engine.Allowed || b != 200 {
		t.Errorf("other ASN: %v burst %v; want 200", o, b)
	}
	alerts = r.report(20, "signup", func(i int, rep *streams.Report) {
		rep.ASN, rep.IP, rep.Attributes = "64502", "198.51.100."+itoa(i), map[string]string{"subnet24": "198.51.100"}
	})
	alertOf(t, alerts, streams.AlertBlock, "attr:subnet24", "198.51.100")
	if o, _, _ := r.check(signup("64503", "198.51.100"), ""); o != engine.Limited {
		t.Errorf("blocked /24: %v; want limited (multiplier 0)", o)
	}
	if o, _, _ := r.check(signup("64503", "198.51.101"), ""); o != engine.Allowed {
		t.Errorf("neighbouring /24: %v; want allowed", o)
	}
}

// TestRecipeCardTesting: five declined payments from one device lock the
// device out of payments (not of the rest of the app); three for one
// account ask it for a step-up.
func TestRecipeCardTesting(t *testing.T) {
	t.Parallel()
	r := loadRecipe(t, "card-testing")
	pay := func(device, account string) engine.Input {
		return engine.Input{Endpoint: "POST /payments", IP: "192.0.2.1", DeviceID: device, Account: account}
	}
	alerts := r.report(5, "payment_declined", func(i int, rep *streams.Report) {
		rep.DeviceID, rep.Account = "tester", "victim-"+itoa(i)
	})
	alertOf(t, alerts, streams.AlertLockout, engine.ClaimSubject, "tester")
	if o, scope, _ := r.check(pay("tester", "fresh"), ""); o != engine.Locked || scope != "device" {
		t.Errorf("testing device: %v %q; want locked scope device", o, scope)
	}
	if o, _, _ := r.check(engine.Input{Endpoint: "GET /feed", IP: "192.0.2.1", DeviceID: "tester"}, ""); o != engine.Allowed {
		t.Errorf("testing device elsewhere: %v; want allowed", o)
	}
	alerts = r.report(3, "payment_declined", func(i int, rep *streams.Report) {
		rep.DeviceID, rep.Account = "phone-"+itoa(i), "carded"
	})
	alertOf(t, alerts, streams.AlertStepUp, "account", "carded")
	if o, scope, _ := r.check(pay("phone-9", "carded"), ""); o != engine.StepUp || scope != "account" {
		t.Errorf("account: %v %q; want step_up scope account", o, scope)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
