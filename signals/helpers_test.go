package signals

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// t0 is the tests' epoch: a whole minute, so second and 10 s slots align.
var t0 = time.Date(2024, 4, 19, 10, 0, 0, 0, time.UTC)

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// sec returns t0 + s seconds (fractions allowed).
func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func report(typ, account string, ts time.Time) *streams.Report {
	return &streams.Report{V: streams.SchemaVersion, Type: typ, Account: account, IP: "198.51.100.7", TS: ts}
}

func failed(account string, ts time.Time) *streams.Report {
	return report(streams.ReportLoginFailed, account, ts)
}

func decision(device string, ts time.Time) *streams.Decision {
	return &streams.Decision{TS: ts, Endpoint: "GET /feed", Class: "read", Limit: "device",
		Allowed: true, Result: "allowed", IP: "203.0.113.9", DeviceID: device, DeviceVerified: true}
}

func denial(limit, ip string, ts time.Time) *streams.Decision {
	return &streams.Decision{TS: ts, Endpoint: "POST /auth/login", Class: "auth", Limit: limit,
		Allowed: false, Result: "limited", IP: ip, DeviceID: "d-" + ip, Account: "acct-" + ip}
}

// lockoutRule is the contract's example account-failures rule.
func lockoutRule() policy.VelocityRule {
	return policy.VelocityRule{Name: "account-failures", Event: streams.ReportLoginFailed, By: policy.PartAccount,
		Threshold: 10, Window: 10 * time.Minute, Action: "lockout", Duration: 15 * time.Minute}
}

// exampleAnomaly is the contract's example anomaly section.
func exampleAnomaly() *policy.Anomaly {
	return &policy.Anomaly{By: policy.PartDevice, Factor: 100, ShortWindow: 10 * time.Second,
		LongWindow: 10 * time.Minute, MinBaseline: 0.05, Multiplier: 0.05, Duration: 15 * time.Minute}
}

// exampleLimits are limits of the contract's example policy.
func exampleLimits() []policy.Limit {
	return []policy.Limit{
		{Name: "global", By: []policy.KeyPart{policy.PartGlobal}},
		{Name: "device", By: []policy.KeyPart{policy.PartDevice}},
		{Name: "login-ip", By: []policy.KeyPart{policy.PartIP, policy.PartRoute}},
		{Name: "login-account", By: []policy.KeyPart{policy.PartAccount, policy.PartRoute}},
	}
}

// alerts returns the alerts among acts.
func alerts(acts []Action) []streams.Alert {
	var as []streams.Alert
	for _, a := range acts {
		if a.Kind == Alert {
			as = append(as, a.Alert)
		}
	}
	return as
}

// summary renders actions compactly for comparisons: "SetLock account/alice lockout".
func summary(acts []Action) string {
	var parts []string
	for _, a := range acts {
		switch a.Kind {
		case SetLock:
			parts = append(parts, fmt.Sprintf("SetLock %s/%s %s", a.Subject, a.ID, a.Lock.Kind))
		case ClearLock:
			parts = append(parts, fmt.Sprintf("ClearLock %s/%s", a.Subject, a.ID))
		case SetMultiplier:
			parts = append(parts, fmt.Sprintf("SetMultiplier %s/%s %s=%g", a.Subject, a.ID, a.Multiplier.Source, a.Multiplier.Value))
		case Alert:
			parts = append(parts, fmt.Sprintf("Alert %s %s/%s", a.Alert.Kind, a.Subject, a.ID))
		default:
			parts = append(parts, fmt.Sprintf("kind %d", a.Kind))
		}
	}
	return strings.Join(parts, "; ")
}

// applyReports feeds reports (seq 0) and returns, per report, the actions it caused.
func applyReports(e *Engine, rs []*streams.Report) [][]Action {
	out := make([][]Action, len(rs))
	for i, r := range rs {
		out[i] = e.ApplyReport(0, 0, r, nil)
	}
	return out
}

// firedAt returns the indexes of the events that caused any action.
func firedAt(per [][]Action) []int {
	var idx []int
	for i, acts := range per {
		if len(acts) > 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// mustNotFire fails when acts is not empty.
func mustNotFire(t *testing.T, what string, acts []Action) {
	t.Helper()
	if len(acts) > 0 {
		t.Fatalf("%s: unexpected actions: %s", what, summary(acts))
	}
}

func itoa(i int64) string { return fmt.Sprint(i) }
