package signals

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// ipSpray is docs/policy.md's ip-spray rule with a threshold of 5.
func ipSpray() policy.VelocityRule {
	return policy.VelocityRule{Name: "ip-spray", Event: streams.ReportLoginFailed, By: policy.PartIP,
		Threshold: 5, Window: 10 * time.Minute, Action: "lockout", Duration: 15 * time.Minute}
}

// failedFrom is a failed login from ip at ts.
func failedFrom(ip string, ts time.Time) *streams.Report {
	r := report(streams.ReportLoginFailed, "", ts)
	r.IP = ip
	return r
}

// TestVelocityByIPv6Prefix (7.1): a velocity rule by ip counts and locks
// an IPv6 client by Options.IPv6Prefix (default /64), under the id its
// buckets use, so failures from 5 addresses of one /64 fire like 5 from
// one address; 128 counts whole addresses; IPv4 addresses are always
// counted whole. The alert names the id locked.
func TestVelocityByIPv6Prefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		prefix int
		ips    []string
		want   string // the actions of the 5th failure ("" none)
	}{
		{"default /64", 0, []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:DB8:1:2::4", "2001:db8:1:2::5"},
			"SetLock ip/2001:db8:1:2::/64 lockout; Alert lockout ip/2001:db8:1:2::/64"},
		{"/56", 56, []string{"2001:db8:1:2::1", "2001:db8:1:3::1", "2001:db8:1:4::1", "2001:db8:1:ff::1", "2001:db8:1:2::5"},
			"SetLock ip/2001:db8:1::/56 lockout; Alert lockout ip/2001:db8:1::/56"},
		{"another /64 apart", 0, []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3", "2001:db8:1:2::4", "2001:db8:1:3::5"}, ""},
		{"/128 whole addresses", 128, []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3", "2001:db8:1:2::4", "2001:db8:1:2::5"}, ""},
		{"/128 one address", 128, []string{"2001:db8:1:2::1", "2001:db8:1:2::1", "2001:db8:1:2::1", "2001:db8:1:2::1", "2001:db8:1:2::1"},
			"SetLock ip/2001:db8:1:2::1 lockout; Alert lockout ip/2001:db8:1:2::1"},
		{"IPv4 whole", 0, []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"}, ""},
		{"IPv4 one address", 0, []string{"192.0.2.7", "192.0.2.7", "192.0.2.7", "192.0.2.7", "192.0.2.7"},
			"SetLock ip/192.0.2.7 lockout; Alert lockout ip/192.0.2.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{ipSpray()}}, IPv6Prefix: tc.prefix})
			var last []Action
			for i, ip := range tc.ips {
				last = e.ApplyReport(0, 0, failedFrom(ip, sec(float64(i))), nil)
				if i < len(tc.ips)-1 {
					mustNotFire(t, fmt.Sprintf("failure %d", i+1), last)
				}
			}
			if got := summary(last); got != tc.want {
				t.Fatalf("5th failure: %q; want %q", got, tc.want)
			}
			if tc.want != "" {
				if a := alerts(last)[0]; a.Subject != "ip" || a.SubjectID != last[0].ID {
					t.Errorf("alert %s/%s; want the id locked, %s", a.Subject, a.SubjectID, last[0].ID)
				}
			}
		})
	}
}

// TestLiftIPv6Prefix (7.1, 6.5): the lift of an ip that is an IPv6
// address lifts its prefix's lock and restarts the prefix's counts, as
// the admin API lifts it (the audit event names the prefix; one of the
// previous release named the address); the prefix's own id does too.
func TestLiftIPv6Prefix(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"2001:db8:1:2::99", "2001:db8:1:2::/64"} {
		e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{ipSpray()}}})
		for i := 0; i < 5; i++ {
			e.ApplyReport(0, 0, failedFrom(fmt.Sprintf("2001:db8:1:2::%x", i+1), sec(float64(i))), nil)
		}
		if got := summary(e.Active(sec(10))); got != "SetLock ip/2001:db8:1:2::/64 lockout" {
			t.Fatalf("active %q; want the /64's lock", got)
		}
		if e.LiftSubjectLock("ip", "2001:db8:1:3::1", sec(20)) {
			t.Fatalf("the lift of another /64 lifted the lock")
		}
		if !e.LiftSubjectLock("ip", id, sec(20)) || len(e.Active(sec(21))) != 0 {
			t.Fatalf("lift of %s: still active %q", id, summary(e.Active(sec(21))))
		}
		for i := 0; i < 4; i++ {
			mustNotFire(t, "a new failure after the lift", e.ApplyReport(0, 0, failedFrom(fmt.Sprintf("2001:db8:1:2::a%x", i), sec(float64(30+i))), nil))
		}
		if acts := e.ApplyReport(0, 0, failedFrom("2001:db8:1:2::b", sec(40)), nil); summary(acts) != "SetLock ip/2001:db8:1:2::/64 lockout; Alert lockout ip/2001:db8:1:2::/64" {
			t.Fatalf("5 new failures of the /64: %q", summary(acts))
		}
	}
}

// TestAnomalyAndOffendersByIPv6Prefix (7.1): the anomaly detector by ip
// counts an IPv6 client's decisions by its /64 and tightens the prefix
// (where the limiter looks the multiplier up), and repeat offenders of a
// limit keyed by ip are its bucket's key: a prefix rotating addresses is
// one offender.
func TestAnomalyAndOffendersByIPv6Prefix(t *testing.T) {
	t.Parallel()
	an := exampleAnomaly()
	an.By = policy.PartIP
	e := New(Options{Risk: policy.Risk{Anomaly: an, RepeatOffender: &policy.RepeatOffender{PerMinute: 3}}, Limits: exampleLimits()})
	var fired []Action
	for i := 0; i < 100 && len(fired) == 0; i++ {
		d := decision("", sec(float64(i)/100))
		d.IP = fmt.Sprintf("2001:db8:1:2::%x", i+1)
		fired = e.ApplyDecision(0, 0, d, nil)
	}
	if got := summary(fired); got != "SetMultiplier ip/2001:db8:1:2::/64 anomaly=0.05; Alert anomaly ip/2001:db8:1:2::/64" {
		t.Fatalf("a burst from one /64: %q; want the prefix tightened", got)
	}
	var acts []Action
	for i := 0; i < 4; i++ {
		acts = e.ApplyDecision(0, 0, denial("login-ip", fmt.Sprintf("2001:db8:1:2::c%x", i), sec(float64(2+i))), acts)
	}
	if got := summary(acts); got != "Alert repeat_offender ip/2001:db8:1:2::/64" {
		t.Fatalf("4 denials of one /64: %q; want one offender alert", got)
	}
	if list := e.Offenders(sec(6)); len(list) != 1 || list[0].Key != "2001:db8:1:2::/64|POST /auth/login" || list[0].Count != 4 {
		t.Fatalf("offenders %+v; want the /64's key", list)
	}
}

// TestVelocityIPRotationAllocs: counting rotating addresses of one /64
// allocates nothing once the prefix's counter is held, nor does counting
// an IPv4 address or an id that is no address (masking neither).
func TestVelocityIPRotationAllocs(t *testing.T) {
	for name, ip := range map[string]func(int) string{
		"IPv6 /64":   func(i int) string { return fmt.Sprintf("2001:db8:1:2::%x", i) },
		"IPv4":       func(int) string { return "192.0.2.7" },
		"no address": func(int) string { return "ip-7" },
	} {
		rule := ipSpray()
		rule.Threshold = 1000
		e := New(Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{rule}}})
		rs := make([]*streams.Report, 200)
		for i := range rs {
			rs[i] = failedFrom(ip(i+1), sec(float64(i)/1000))
		}
		e.ApplyReport(0, 0, rs[0], nil)
		i := 0
		if n := testing.AllocsPerRun(100, func() { i++; e.ApplyReport(0, 0, rs[i], nil) }); n != 0 {
			t.Errorf("%s: a report allocates %v times", name, n)
		}
	}
}
