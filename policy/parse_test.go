package policy

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// contractExample is the policy file of CONTRACT.md section 3, verbatim
// except for the two file paths, which the tests point at placeholders.
const contractExample = `version: 1
identity:                       # proxy mode only
  trusted_proxies: [10.0.0.0/8]
  user_header: X-User-Id
  user_signature_header: X-User-Signature   # hex HMAC-SHA256(user id); checked when the key is set
  user_signature_key_env: TOLLGATE_USER_KEY
  device_header: X-Device-Id
  account_body_field: username  # on class auth routes

routes:                         # first match wins; METHOD and path glob
  - {match: "POST /auth/login", class: auth}
  - {match: "POST /token",      class: auth}
  - {match: "GET /search*",     class: expensive}
  - {match: "GET *",            class: read}
  - {match: "* *",              class: write}

limits:                         # all that match apply; strictest wins
  - {name: global,        by: [global],          rate: 100000/s}
  - {name: ip-unauth,     by: [ip],              rate: 60/min,  if: {authenticated: false}}
  - {name: ip-auth,       by: [ip],              rate: 600/min, if: {authenticated: true}}
  - {name: user-write,    by: [user],            rate: 60/min,  if: {class: write}}
  - {name: user-read,     by: [user],            rate: 300/min, if: {class: [read, expensive]}}
  - {name: user-search,   by: [user],            rate: 20/min,  if: {class: expensive}}
  - {name: device,        by: [device],          rate: 600/min}
  - {name: login-ip,      by: [ip, route],       rate: 10/min,  if: {class: auth}}
  - {name: login-account, by: [account, route],  rate: 5/min,   if: {class: auth}}

failure_mode: {default: open, auth: closed}   # per class; a limit may set its own

risk:
  velocity:
    - {name: account-failures, event: login_failed, by: account, threshold: 10, window: 10m,
       action: lockout, duration: 15m,          # action: lockout | step_up | tighten
       escalate: {factor: 2, max: 24h},         # optional: each repeat within 24 h lasts longer
       exempt_attested: true}                   # optional: a device that attested and logged in
                                                # to this account before is not locked out
    - {name: ip-spray, event: login_failed, by: ip, threshold: 50, window: 10m,
       action: tighten, multiplier: 0.1, duration: 30m}
  anomaly: {by: device, factor: 100, short_window: 10s, long_window: 10m,
            min_baseline: 0.05/s, multiplier: 0.05, duration: 15m}
  reputation:
    asn_database: /var/lib/geoip/GeoLite2-ASN.mmdb
    rules:
      - {asns: [16509, 14061], multiplier: 0.25, reason: datacenter}
      - {cidrs: [203.0.113.0/24], multiplier: 0.1, reason: vpn-farm}
  attestation:
    verified_multiplier: 2.0
    unverified_multiplier: 0.5
    valid_for: 24h
    apple: {app_id: TEAMID.com.example.app, environment: production,
            root_ca_file: /etc/tollgate/Apple_App_Attestation_Root_CA.pem}
    android: {package_name: com.example.app, decryption_key_env: TOLLGATE_PI_DEC_KEY,
              verification_key_env: TOLLGATE_PI_VER_KEY}
  repeat_offender: {per_minute: 100}
`

// writeContractExample writes the contract example into a temp dir, with
// empty placeholder files for the ASN database and Apple root CA, and
// returns the policy file's path and the dir.
func writeContractExample(t *testing.T) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	asn := filepath.Join(dir, "GeoLite2-ASN.mmdb")
	ca := filepath.Join(dir, "Apple_App_Attestation_Root_CA.pem")
	for _, f := range []string{asn, ca} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text := strings.NewReplacer(
		"/var/lib/geoip/GeoLite2-ASN.mmdb", asn,
		"/etc/tollgate/Apple_App_Attestation_Root_CA.pem", ca,
	).Replace(contractExample)
	path = filepath.Join(dir, "tollgate.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

func TestLoadContractExample(t *testing.T) {
	t.Parallel()
	path, dir := writeContractExample(t)
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if p.Source != path || p.Version != 1 {
		t.Errorf("Source, Version = %q, %d", p.Source, p.Version)
	}

	wantID := Identity{
		TrustedProxies:       []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		UserHeader:           "X-User-Id",
		UserSignatureHeader:  "X-User-Signature",
		UserSignatureKeyEnv:  "TOLLGATE_USER_KEY",
		UserSignatureKeyEnvs: []string{"TOLLGATE_USER_KEY"}, UserSignatureKeyEnvLine: 6,
		UserSignatureMaxAge: DefaultUserSignatureMaxAge,
		DeviceHeader:        "X-Device-Id",
		DeviceTokenHeader:   "X-Device-Token",
		AccountBodyField:    "username",
		AccountBodyFields:   []string{"username"},
	}
	if !reflect.DeepEqual(p.Identity, wantID) {
		t.Errorf("Identity = %+v, want %+v", p.Identity, wantID)
	}

	if got, want := p.Classes, []string{"auth", "expensive", "read", "write", "default"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Classes = %q, want %q", got, want)
	}
	wantRoutes := []Route{
		{Match: "POST /auth/login", Method: "POST", Pattern: "/auth/login", Class: "auth", ClassIndex: 0, Line: 11},
		{Match: "POST /token", Method: "POST", Pattern: "/token", Class: "auth", ClassIndex: 0, Line: 12},
		{Match: "GET /search*", Method: "GET", Pattern: "/search*", Class: "expensive", ClassIndex: 1, Line: 13},
		{Match: "GET *", Method: "GET", Pattern: "*", Class: "read", ClassIndex: 2, Line: 14},
		{Match: "* *", Method: "*", Pattern: "*", Class: "write", ClassIndex: 3, Line: 15},
	}
	if !reflect.DeepEqual(p.Routes, wantRoutes) {
		t.Errorf("Routes = %+v\nwant %+v", p.Routes, wantRoutes)
	}

	if len(p.Limits) != 9 {
		t.Fatalf("len(Limits) = %d, want 9", len(p.Limits))
	}
	no, yes := false, true
	global := p.Limits[0]
	if global.Name != "global" || !reflect.DeepEqual(global.By, []KeyPart{PartGlobal}) ||
		global.Rate != 100000 || global.Period != time.Second || global.Burst != 100000 ||
		global.RateText != "100000/s" || global.Line != 18 || global.Index != 0 {
		t.Errorf("global = %+v", global)
	}
	unauth := p.Limits[1]
	if unauth.IfAuthenticated == nil || *unauth.IfAuthenticated != no || unauth.Period != time.Minute || unauth.Burst != 60 {
		t.Errorf("ip-unauth = %+v", unauth)
	}
	if a := p.Limits[2].IfAuthenticated; a == nil || *a != yes {
		t.Errorf("ip-auth IfAuthenticated = %v", a)
	}
	if got := p.Limits[4].IfClasses; !reflect.DeepEqual(got, []string{"read", "expensive"}) {
		t.Errorf("user-read IfClasses = %q", got)
	}
	if got := p.Limits[8]; !reflect.DeepEqual(got.By, []KeyPart{PartAccount, PartRoute}) || got.Rate != 5 || got.Index != 8 {
		t.Errorf("login-account = %+v", got)
	}
	if p.FailureDefault != FailOpen || !reflect.DeepEqual(p.FailureByClass, map[string]FailureMode{"auth": FailClosed}) {
		t.Errorf("failure modes = %v, %v", p.FailureDefault, p.FailureByClass)
	}

	wantVelocity := []VelocityRule{
		{Name: "account-failures", Event: "login_failed", By: PartAccount, Threshold: 10, Window: 10 * time.Minute,
			Action: "lockout", Duration: 15 * time.Minute, Escalate: &Escalate{Factor: 2, Max: 24 * time.Hour},
			ExemptAttested: true, Line: 32},
		{Name: "ip-spray", Event: "login_failed", By: PartIP, Threshold: 50, Window: 10 * time.Minute,
			Action: "tighten", Multiplier: 0.1, Duration: 30 * time.Minute, Line: 37},
	}
	if !reflect.DeepEqual(p.Risk.Velocity, wantVelocity) {
		t.Errorf("Velocity = %+v\nwant %+v", p.Risk.Velocity, wantVelocity)
	}
	wantAnomaly := &Anomaly{By: PartDevice, Factor: 100, ShortWindow: 10 * time.Second, LongWindow: 10 * time.Minute,
		MinBaseline: 0.05, Multiplier: 0.05, Duration: 15 * time.Minute}
	if !reflect.DeepEqual(p.Risk.Anomaly, wantAnomaly) {
		t.Errorf("Anomaly = %+v", p.Risk.Anomaly)
	}
	wantRep := &Reputation{
		ASNDatabase: filepath.Join(dir, "GeoLite2-ASN.mmdb"),
		Rules: []ReputationRule{
			{ASNs: []uint32{16509, 14061}, Multiplier: 0.25, Reason: "datacenter", Line: 44},
			{CIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, Multiplier: 0.1, Reason: "vpn-farm", Line: 45},
		},
	}
	if !reflect.DeepEqual(p.Risk.Reputation, wantRep) {
		t.Errorf("Reputation = %+v", p.Risk.Reputation)
	}
	wantAtt := &Attestation{
		VerifiedMultiplier: 2, UnverifiedMultiplier: 0.5, UnverifiedSet: true, ValidFor: 24 * time.Hour, TrustedFor: DefaultTrustedFor,
		MaxPerIP: &Limit{Index: -1, Name: AttestationLimitName, By: []KeyPart{PartIP}, Rate: DefaultAttestationMaxPerIP, Period: time.Hour,
			RateText: "120/h", Burst: DefaultAttestationMaxPerIP, Kind: KindBucket, Line: 47},
		Apple: &AppleAttestation{AppID: "TEAMID.com.example.app", Environment: "production",
			RootCAFile: filepath.Join(dir, "Apple_App_Attestation_Root_CA.pem"), RootCAFileLine: 51},
		Android: &AndroidAttestation{PackageName: "com.example.app", DecryptionKeyEnv: "TOLLGATE_PI_DEC_KEY",
			VerificationKeyEnv: "TOLLGATE_PI_VER_KEY", DecryptionKeyEnvLine: 52, VerificationKeyEnvLine: 53, MaxAge: 5 * time.Minute},
	}
	if !reflect.DeepEqual(p.Risk.Attestation, wantAtt) {
		t.Errorf("Attestation = %+v\napple %+v\nandroid %+v\nmax_per_ip %+v", p.Risk.Attestation, p.Risk.Attestation.Apple, p.Risk.Attestation.Android, p.Risk.Attestation.MaxPerIP)
	}
	if !reflect.DeepEqual(p.Risk.RepeatOffender, &RepeatOffender{PerMinute: 100}) {
		t.Errorf("RepeatOffender = %+v", p.Risk.RepeatOffender)
	}
}

func TestLoadRelativePaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sub := filepath.Join(dir, "conf")
	if err := os.MkdirAll(filepath.Join(sub, "geo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "geo", "asn.mmdb"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sub, "p.yaml")
	text := "version: 1\nlimits: [{name: a, by: [ip], rate: 1/s}]\nrisk:\n  reputation: {asn_database: geo/asn.mmdb}\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := p.Risk.Reputation.ASNDatabase, filepath.Join(sub, "geo", "asn.mmdb"); got != want {
		t.Errorf("ASNDatabase = %q, want %q", got, want)
	}
	// Parse resolves against the current directory, where geo/asn.mmdb is not.
	_, err = Parse("p.yaml", []byte(text))
	if want := `p.yaml:4: asn_database "geo/asn.mmdb": no such file`; err == nil || err.Error() != want {
		t.Errorf("Parse error = %v, want %s", err, want)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want a not-exist error", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", MaxFileSize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(big)
	if want := big + ":1: file too large (more than 1048576 bytes)"; err == nil || err.Error() != want {
		t.Errorf("Load(big) = %v, want %s", err, want)
	}
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrInvalid) {
		t.Errorf("Load(big) error does not wrap ErrTooLarge and ErrInvalid")
	}
	if _, err := Parse("big.yaml", make([]byte, MaxFileSize+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Parse(big) = %v, want ErrTooLarge", err)
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	text := `version: 1
limits:
  - {name: half, by: [ip], rate: 0.5/s}
  - {name: b, by: [device], rate: 10/hour, burst: 25, shadow: true, failure_mode: closed}
  - {name: c, by: [user, route], rate: 3/minute}
  - {name: d, by: [account], rate: 100/day}
  - {name: e, by: [account], rate: 2.5/d, burst: 10}
risk:
  attestation:
    apple: {app_id: ABCDE12345.com.example, root_ca_file: ` + ca + `}
    android: {package_name: com.example, decryption_key_env: D, verification_key_env: V}
  repeat_offender: {}
  reputation: {rules: [{cidrs: [192.0.2.7, "2001:db8::1", 198.51.100.9/24], multiplier: 0}]}
`
	p, err := Parse("d.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := p.Classes, []string{"default"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Classes = %q, want %q", got, want)
	}
	half := p.Limits[0]
	if half.Rate != 0.5 || half.Period != time.Second || half.Burst != 1 || half.PerSecond() != 0.5 {
		t.Errorf("half = %+v (burst must default to max(N, 1))", half)
	}
	b := p.Limits[1]
	if b.Rate != 10 || b.Period != time.Hour || b.Burst != 25 || !b.Shadow || b.FailureMode == nil || *b.FailureMode != FailClosed {
		t.Errorf("b = %+v", b)
	}
	if c := p.Limits[2]; c.Period != time.Minute || c.RateText != "3/minute" {
		t.Errorf("c = %+v", c)
	}
	if d := p.Limits[3]; d.Rate != 100 || d.Period != 24*time.Hour || d.Burst != 100 || d.RateText != "100/day" {
		t.Errorf("d = %+v (N/day: a period of 24h)", d)
	}
	if e := p.Limits[4]; e.Rate != 2.5 || e.Period != 24*time.Hour || e.Burst != 10 {
		t.Errorf("e = %+v", e)
	}
	att := p.Risk.Attestation
	if att.VerifiedMultiplier != 1 || att.UnverifiedSet || att.ValidFor != 24*time.Hour {
		t.Errorf("attestation = %+v", att)
	}
	if att.Apple.Environment != "production" || att.Android.MaxAge != 5*time.Minute || att.Android.RequireStrongIntegrity {
		t.Errorf("apple %+v android %+v", att.Apple, att.Android)
	}
	if p.Risk.RepeatOffender == nil || p.Risk.RepeatOffender.PerMinute != 100 {
		t.Errorf("RepeatOffender = %+v", p.Risk.RepeatOffender)
	}
	wantCIDRs := []netip.Prefix{
		netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("2001:db8::1/128"),
		netip.MustParsePrefix("198.51.100.0/24"),
	}
	if got := p.Risk.Reputation.Rules[0].CIDRs; !reflect.DeepEqual(got, wantCIDRs) {
		t.Errorf("CIDRs = %v, want %v", got, wantCIDRs)
	}
	if p.Risk.Velocity != nil || p.Risk.Anomaly != nil || len(p.Routes) != 0 {
		t.Errorf("unexpected sections: %+v", p.Risk)
	}
}

func TestParseYAMLFeatures(t *testing.T) {
	t.Parallel()
	// Anchors, aliases and merge keys work; explicit keys beat merged ones.
	text := `version: 1
x-base: &base {by: [ip], rate: 10/s}
limits:
  - {<<: *base, name: a}
  - {<<: *base, name: b, rate: 5/s}
`
	_, err := Parse("m.yaml", []byte(text))
	if want := `m.yaml:2: unknown field "x-base" (want one of version, identity, routes, limits, failure_mode, risk, lists, allow, deny, envoy, alerting)`; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
	text = `version: 1
limits:
  - &a {name: a, by: [ip], rate: 10/s}
  - {<<: *a, name: b, rate: 5/s}
`
	p, err := Parse("m.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if b := p.Limits[1]; b.Name != "b" || b.Rate != 5 || !reflect.DeepEqual(b.By, []KeyPart{PartIP}) {
		t.Errorf("b = %+v", b)
	}
}

func TestParseErrorList(t *testing.T) {
	t.Parallel()
	text := `version: 2
limits:
  - {name: a, by: [ip], rate: 1/week}
  - {name: a, by: [ip], rate: 1/s, bogus: 1}
`
	_, err := Parse("multi.yaml", []byte(text))
	want := `multi.yaml:1: version 2: unsupported (want 1)
multi.yaml:3: rate "1/week": want N/s, N/min, N/h or N/day (N a positive number)
multi.yaml:4: unknown field "bogus" (want one of name, by, rate, burst, quota, concurrency, lease_ttl, shadow, failure_mode, if, trusted_devices, local_share)
multi.yaml:4: duplicate limit name "a" (first at line 3)`
	if err == nil || err.Error() != want {
		t.Fatalf("err =\n%v\nwant\n%s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.File != "multi.yaml" || e.Line != 1 || e.Msg != "version 2: unsupported (want 1)" {
		t.Errorf("errors.As = %+v", e)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error does not wrap ErrInvalid")
	}
	list, ok := err.(interface{ Unwrap() []error })
	if !ok || len(list.Unwrap()) != 4 {
		t.Errorf("joined error does not hold 4 errors")
	}
}

func TestParseTooManyErrors(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("version: 1\nlimits:\n")
	for range 150 {
		b.WriteString("  - {name: a, by: [ip], rate: 1/s}\n")
	}
	_, err := Parse("many.yaml", []byte(b.String()))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[maxErrors] != "many.yaml:104: too many errors (49 more not shown)" {
		t.Errorf("got %d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

func TestParseAliasBomb(t *testing.T) {
	t.Parallel()
	// Every reputation rule refers to the same large list of ASNs: expanded,
	// that would be far more nodes than the file holds.
	var b strings.Builder
	b.WriteString("version: 1\nlimits: [{name: a, by: [ip], rate: 1/s}]\nx: &asns [")
	for i := range 20000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("1")
	}
	b.WriteString("]\nrisk:\n  reputation:\n    rules:\n")
	for range 500 {
		b.WriteString("      - {asns: *asns, multiplier: 1}\n")
	}
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "too many values") {
		t.Errorf("err = %.300v, want too many values", err)
	}
}

func TestParseShadowRiskRules(t *testing.T) {
	t.Parallel()
	text := `version: 1
limits:
  - {name: a, by: [ip], rate: 10/s}
risk:
  velocity:
    - {name: on, event: login_failed, by: account, threshold: 3, window: 1m, action: lockout, duration: 1m}
    - {name: off, event: login_failed, by: ip, threshold: 3, window: 1m, action: step_up, duration: 1m, shadow: true}
  anomaly: {by: device, factor: 10, short_window: 10s, long_window: 10m, min_baseline: 1/s,
            multiplier: 0.5, duration: 1m, shadow: true}
`
	p, err := Parse("s.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if v := p.Risk.Velocity; v[0].Shadow || !v[1].Shadow {
		t.Errorf("velocity shadow = %v, %v; want false, true", v[0].Shadow, v[1].Shadow)
	}
	if !p.Risk.Anomaly.Shadow {
		t.Error("anomaly shadow = false, want true")
	}
}

// TestParseKinds: quotas and concurrency limits, their defaults and their
// mistakes, each at its line.
func TestParseKinds(t *testing.T) {
	t.Parallel()
	p, err := Parse("k.yaml", []byte(`version: 1
limits:
  - {name: sms, by: [account], quota: 100/month, if: {attr: {plan: [free]}}}
  - {name: d, by: [ip], quota: 5/day}
  - {name: w, by: [ip], quota: 7/week, shadow: true}
  - {name: exports, by: [user], concurrency: 2}
  - {name: reports, by: [user], concurrency: 1, lease_ttl: 5m}
`))
	if err != nil {
		t.Fatal(err)
	}
	sms, d, w, ex, rep := p.Limits[0], p.Limits[1], p.Limits[2], p.Limits[3], p.Limits[4]
	if sms.Kind != KindQuota || sms.Calendar != Month || sms.Burst != 100 || sms.RateText != "100/month" || d.Calendar != Day || w.Calendar != Week || !w.Shadow {
		t.Errorf("quotas: %+v %+v %+v", sms, d, w)
	}
	if ex.Kind != KindConcurrency || ex.Burst != 2 || ex.LeaseTTL != DefaultLeaseTTL || rep.LeaseTTL != 5*time.Minute {
		t.Errorf("concurrency: %+v %+v", ex, rep)
	}
	if !p.HasConcurrency() || p.FirstConcurrency().Name != "exports" {
		t.Errorf("FirstConcurrency = %+v", p.FirstConcurrency())
	}
	head := "version: 1\nlimits:\n"
	for _, tc := range []struct{ text, want string }{
		{"  - {name: a, by: [ip], quota: 10/year}\n", `k.yaml:3: quota "10/year": want N/day, N/week or N/month (N a whole number from 1)`},
		{"  - {name: a, by: [ip], quota: 0.5/day}\n", `k.yaml:3: quota "0.5/day": want N/day, N/week or N/month (N a whole number from 1)`},
		{"  - {name: a, by: [ip], quota: 0/day}\n", `k.yaml:3: quota "0/day": want N/day, N/week or N/month (N a whole number from 1)`},
		{"  - {name: a, by: [ip], rate: 1/s, quota: 1/day}\n", `k.yaml:3: quota: a limit is a bucket (rate), a quota or a concurrency limit; this one also has rate`},
		{"  - {name: a, by: [ip], quota: 1/day, burst: 5}\n", `k.yaml:3: burst: only a limit with rate has one`},
		{"  - {name: a, by: [ip], rate: 1/s, lease_ttl: 1m}\n", `k.yaml:3: lease_ttl: only a limit with concurrency has one`},
		{"  - {name: a, by: [account], concurrency: 1, trusted_devices: own}\n", `k.yaml:3: trusted_devices: only a limit with rate has one`},
		{"  - {name: a, by: [ip], concurrency: 0}\n", `k.yaml:3: concurrency 0: must be between 1 and 1000000`},
		{"  - {name: a, by: [ip], concurrency: 1.5}\n", `k.yaml:3: concurrency: want an integer, got "1.5"`},
		{"  - {name: a, by: [ip], concurrency: 1, lease_ttl: 100ms}\n", `k.yaml:3: lease_ttl 100ms: must be between 1s and 24h0m0s`},
		{"  - name: a\n    by: [ip]\n", `k.yaml:3: limit: missing required field "rate" (or "quota", or "concurrency")`},
	} {
		_, err := Parse("k.yaml", []byte(head+tc.text))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v\nwant %s", strings.TrimSpace(tc.text), err, tc.want)
		}
	}
}

// TestAccountBodyFields: account_body_field takes one field or a list.
func TestAccountBodyFields(t *testing.T) {
	t.Parallel()
	for text, want := range map[string][]string{
		"account_body_field: username":          {"username"},
		"account_body_field: [username, email]": {"username", "email"},
	} {
		p, err := Parse("p.yaml", []byte("version: 1\nidentity:\n  "+text+"\nlimits: [{name: a, by: [ip], rate: 1/s}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Identity.AccountFields(); !slices.Equal(got, want) || p.Identity.AccountBodyField != want[0] {
			t.Errorf("%s: fields %q, first %q; want %q", text, got, p.Identity.AccountBodyField, want)
		}
	}
	if f := (&Identity{}).AccountFields(); f != nil {
		t.Errorf("no field: %q", f)
	}
}
