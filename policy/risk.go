package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The keys of the `risk` section's mappings.
var (
	riskFields          = []string{"velocity", "anomaly", "reputation", "attestation", "repeat_offender"}
	velocityFields      = []string{"name", "event", "by", "threshold", "window", "action", "duration", "multiplier", "escalate", "exempt_attested", "shadow", "classes"}
	escalateFields      = []string{"factor", "max"}
	anomalyFields       = []string{"by", "factor", "short_window", "long_window", "min_baseline", "multiplier", "duration", "shadow"}
	reputationFields    = []string{"asn_database", "rules"}
	reputationRuleField = []string{"asns", "cidrs", "multiplier", "reason"}
	attestationFields   = []string{"verified_multiplier", "unverified_multiplier", "valid_for", "trusted_for", "token_key_env", "max_per_ip", "apple", "android"}
	appleFields         = []string{"app_id", "environment", "root_ca_file"}
	androidFields       = []string{"package_name", "decryption_key_env", "verification_key_env", "max_age", "require_strong_integrity"}
	repeatOffenderField = []string{"per_minute"}

	velocityActions = []string{ActionLockout, ActionStepUp, ActionTighten, ActionBlock}
	anomalyBy       = []string{"device", "ip", "user", "account"}
)

// Defaults of the `risk` section.
const (
	// DefaultRepeatOffenderPerMinute is `repeat_offender.per_minute` when the
	// section is present without it.
	DefaultRepeatOffenderPerMinute = 100
	// DefaultAttestationValidFor is `attestation.valid_for` when unset.
	DefaultAttestationValidFor = 24 * time.Hour
	// DefaultTrustedFor is `attestation.trusted_for` when unset (7.1).
	DefaultTrustedFor = 30 * 24 * time.Hour
	// DefaultAttestationMaxPerIP is `attestation.max_per_ip` when unset:
	// DefaultAttestationMaxPerIP attestations per hour per client address,
	// generous for carrier-grade NAT (an Android install attests once a
	// valid_for, about one a day), 360 times fewer minted ids a day than
	// the built-in route limit alone let one address make.
	DefaultAttestationMaxPerIP = 120
	// AttestationLimitName names the limit of `attestation.max_per_ip`
	// (Attestation.MaxPerIP): in denials, decision events and metrics. A
	// limit of `limits` may not take it.
	AttestationLimitName = "attestation-ip"
	// DefaultDeviceTokenHeader is `identity.device_token_header` when unset.
	DefaultDeviceTokenHeader = "X-Device-Token"
	// DefaultAndroidMaxAge is `attestation.android.max_age` when unset.
	DefaultAndroidMaxAge = 5 * time.Minute
	// maxThreshold bounds velocity thresholds and repeat_offender.per_minute.
	maxThreshold = 1_000_000_000
)

// risk parses the `risk` section.
func (ps *parser) risk(f field) Risk {
	var r Risk
	m := ps.mapping(f.val, f.name, riskFields)
	if m == nil {
		return r
	}
	for _, g := range m.fields {
		if isNull(g.val) && g.name != "repeat_offender" {
			continue // an empty section is no section
		}
		switch g.name {
		case "velocity":
			r.Velocity = ps.velocity(g)
		case "anomaly":
			r.Anomaly = ps.anomaly(g)
		case "reputation":
			r.Reputation = ps.reputation(g)
		case "attestation":
			r.Attestation = ps.attestation(g)
		case "repeat_offender":
			r.RepeatOffender = ps.repeatOffender(g)
		}
	}
	return r
}

// velocity parses `risk.velocity`.
func (ps *parser) velocity(f field) []VelocityRule {
	l, ok := ps.list(f)
	if !ok {
		return nil
	}
	var rules []VelocityRule
	seen := map[string]int{}
	for _, n := range l {
		if rule, ok := ps.velocityRule(n, seen); ok {
			rules = append(rules, rule)
		}
	}
	return rules
}

// velocityRule parses one entry of `risk.velocity`.
func (ps *parser) velocityRule(n *yaml.Node, seen map[string]int) (VelocityRule, bool) {
	rule := VelocityRule{Line: n.Line}
	m := ps.mapping(n, "velocity entry", velocityFields)
	if m == nil {
		return rule, false
	}
	ok := ps.require(m, "velocity rule", "name", "event", "by", "threshold", "window", "action", "duration")
	for _, g := range m.fields {
		good := true
		switch g.name {
		case "name":
			rule.Name, good = ps.uniqueName(g, "velocity rule", seen)
		case "event":
			rule.Event, good = ps.velocityEvent(g)
		case "by":
			good = ps.velocityBy(g, &rule)
		case "classes":
			good = ps.velocityClasses(g, &rule)
		case "threshold":
			rule.Threshold, good = ps.intRange(g, 1, maxThreshold)
		case "window":
			rule.Window, good = ps.duration(g)
		case "action":
			rule.Action, good = ps.oneOf(g, velocityActions...)
		case "duration":
			rule.Duration, good = ps.duration(g)
		case "multiplier":
			rule.Multiplier, good = ps.fraction(g)
		case "escalate":
			rule.Escalate, good = ps.escalate(g)
		case "exempt_attested":
			rule.ExemptAttested, good = ps.boolean(g)
		case "shadow":
			rule.Shadow, good = ps.boolean(g)
		}
		ok = ok && good
	}
	if !ok {
		return rule, false
	}
	if !ps.checkVelocityAction(n, m, &rule) {
		return rule, false
	}
	if rule.Escalate != nil && rule.Escalate.Max < rule.Duration {
		g, _ := m.get("escalate")
		ps.errorf(g.val, "escalate: max %s is shorter than duration %s", rule.Escalate.Max, rule.Duration)
		return rule, false
	}
	return rule, true
}

// escalate parses a velocity rule's `escalate`.
func (ps *parser) escalate(f field) (*Escalate, bool) {
	m := ps.mapping(f.val, f.name, escalateFields)
	if m == nil {
		return nil, false
	}
	ok := ps.require(m, "escalate", "factor", "max")
	e := &Escalate{}
	if g, has := m.get("factor"); has {
		x, good := ps.number(g)
		if good && x < 1 {
			ps.errorf(g.val, "factor %s: must be at least 1", g.val.Value)
			good = false
		}
		e.Factor = x
		ok = ok && good
	}
	if g, has := m.get("max"); has {
		d, good := ps.duration(g)
		e.Max = d
		ok = ok && good
	}
	return e, ok
}

// anomaly parses `risk.anomaly`.
func (ps *parser) anomaly(f field) *Anomaly {
	m := ps.mapping(f.val, f.name, anomalyFields)
	if m == nil {
		return nil
	}
	ok := ps.require(m, "anomaly", "by", "factor", "short_window", "long_window", "min_baseline", "multiplier", "duration")
	a := &Anomaly{}
	for _, g := range m.fields {
		good := true
		switch g.name {
		case "by":
			var s string
			if s, good = ps.oneOf(g, anomalyBy...); good {
				a.By, _ = keyPartOf(s)
			}
		case "factor":
			if a.Factor, good = ps.number(g); good && a.Factor <= 1 {
				ps.errorf(g.val, "factor %s: must be greater than 1", g.val.Value)
				good = false
			}
		case "short_window":
			a.ShortWindow, good = ps.duration(g)
		case "long_window":
			a.LongWindow, good = ps.duration(g)
		case "min_baseline":
			var s string
			if s, good = ps.scalar(g.val, g.name); !good {
				break
			}
			n, period, err := parseRate(s)
			if err != nil {
				ps.errorf(g.val, "min_baseline %q: %v", s, err)
				good = false
				break
			}
			a.MinBaseline = n / period.Seconds()
		case "multiplier":
			a.Multiplier, good = ps.fraction(g)
		case "duration":
			a.Duration, good = ps.duration(g)
		case "shadow":
			a.Shadow, good = ps.boolean(g)
		}
		ok = ok && good
	}
	if ok && a.ShortWindow >= a.LongWindow {
		g, _ := m.get("short_window")
		ps.errorf(g.val, "short_window %s: must be shorter than long_window %s", a.ShortWindow, a.LongWindow)
		ok = false
	}
	if !ok {
		return nil
	}
	return a
}

// reputation parses `risk.reputation`.
func (ps *parser) reputation(f field) *Reputation {
	m := ps.mapping(f.val, f.name, reputationFields)
	if m == nil {
		return nil
	}
	r := &Reputation{}
	if g, has := m.get("asn_database"); has {
		r.ASNDatabase, _ = ps.existingFile(g)
	}
	if g, has := m.get("rules"); has && !isNull(g.val) {
		l, ok := ps.list(g)
		if !ok {
			return r
		}
		for _, n := range l {
			if rule, ok := ps.reputationRule(n); ok {
				r.Rules = append(r.Rules, rule)
			}
		}
	}
	return r
}

// reputationRule parses one entry of `risk.reputation.rules`.
func (ps *parser) reputationRule(n *yaml.Node) (ReputationRule, bool) {
	rule := ReputationRule{Line: n.Line}
	m := ps.mapping(n, "rules entry", reputationRuleField)
	if m == nil {
		return rule, false
	}
	ok := ps.require(m, "reputation rule", "multiplier")
	_, hasASNs := m.get("asns")
	_, hasCIDRs := m.get("cidrs")
	if !hasASNs && !hasCIDRs {
		ps.errorf(n, "reputation rule: want asns, cidrs or both")
		ok = false
	}
	for _, g := range m.fields {
		switch g.name {
		case "asns":
			asns, good := ps.asnList(g)
			rule.ASNs, ok = asns, ok && good
		case "cidrs":
			cidrs, good := ps.cidrList(g)
			rule.CIDRs, ok = cidrs, ok && good
		case "multiplier":
			x, good := ps.number(g)
			if good && x < 0 {
				ps.errorf(g.val, "multiplier %s: must not be negative", g.val.Value)
				good = false
			}
			rule.Multiplier = x
			ok = ok && good
		case "reason":
			s, good := ps.scalar(g.val, g.name)
			rule.Reason = s
			ok = ok && good
		}
	}
	return rule, ok
}

// asnList reads a non-empty list of AS numbers (1 to 4294967295); the
// valid ones are returned even when others are not.
func (ps *parser) asnList(g field) ([]uint32, bool) {
	l, ok := ps.nonEmptyList(g)
	if !ok {
		return nil, false
	}
	var asns []uint32
	for _, e := range l {
		x, good := ps.integer(field{name: "asns", key: g.key, val: e})
		if !good {
			ok = false
			continue
		}
		if x < 1 || x > 4294967295 {
			ps.errorf(e, "asns %d: want an AS number between 1 and 4294967295", x)
			ok = false
			continue
		}
		asns = append(asns, uint32(x))
	}
	return asns, ok
}

// cidrList reads a non-empty list of CIDRs or single addresses.
func (ps *parser) cidrList(g field) ([]netip.Prefix, bool) {
	l, ok := ps.nonEmptyList(g)
	if !ok {
		return nil, false
	}
	return ps.prefixes(g, l)
}

// prefixes reads the CIDRs or single addresses of g's list l; the valid
// ones are returned even when others are not.
func (ps *parser) prefixes(g field, l []*yaml.Node) ([]netip.Prefix, bool) {
	ok := true
	var out []netip.Prefix
	for _, e := range l {
		s, good := ps.scalar(e, g.name)
		if !good {
			ok = false
			continue
		}
		pfx, err := parsePrefixOrAddr(s)
		if err != nil {
			ps.errorf(e, "%s %q: %v", g.name, s, err)
			ok = false
			continue
		}
		out = append(out, pfx)
	}
	return out, ok
}

// attestation parses `risk.attestation`.
func (ps *parser) attestation(f field) *Attestation {
	m := ps.mapping(f.val, f.name, attestationFields)
	if m == nil {
		return nil
	}
	a := &Attestation{VerifiedMultiplier: 1, ValidFor: DefaultAttestationValidFor, TrustedFor: DefaultTrustedFor,
		MaxPerIP: attestationLimit(DefaultAttestationMaxPerIP, time.Hour, fmt.Sprintf("%d/h", DefaultAttestationMaxPerIP), f.val.Line)}
	ok := true
	for _, g := range m.fields {
		good := true
		switch g.name {
		case "verified_multiplier":
			if a.VerifiedMultiplier, good = ps.number(g); good && a.VerifiedMultiplier < 1 {
				ps.errorf(g.val, "verified_multiplier %s: must be at least 1", g.val.Value)
				good = false
			}
		case "unverified_multiplier":
			a.UnverifiedMultiplier, good = ps.fraction(g)
			a.UnverifiedSet = good
		case "valid_for":
			a.ValidFor, good = ps.duration(g)
		case "trusted_for":
			a.TrustedFor, good = ps.duration(g)
		case "token_key_env":
			a.TokenKeyEnv, good = ps.envName(g)
			a.TokenKeyEnvLine = g.val.Line
		case "max_per_ip":
			a.MaxPerIP, good = ps.attestationMaxPerIP(g)
		case "apple":
			a.Apple, good = ps.apple(g)
		case "android":
			a.Android, good = ps.android(g)
		}
		ok = ok && good
	}
	if !ok {
		return nil
	}
	return a
}

// attestationMaxPerIP parses `risk.attestation.max_per_ip`: a rate
// ("20/h", "100/day"), or off (nil: no bound but the policy's limits).
func (ps *parser) attestationMaxPerIP(g field) (*Limit, bool) {
	s, good := ps.scalar(g.val, g.name)
	if !good {
		return nil, false
	}
	if s == "off" {
		return nil, true
	}
	n, period, err := parseRate(s)
	if err != nil {
		ps.errorf(g.val, "max_per_ip %q: %v (or off)", s, err)
		return nil, false
	}
	return attestationLimit(n, period, s, g.val.Line), true
}

// attestationLimit is the limit of `attestation.max_per_ip`: a bucket
// per client address (the ip key part: /64 for IPv6 by default) of n
// attestations, refilled n per period.
func attestationLimit(n float64, period time.Duration, text string, line int) *Limit {
	return &Limit{Index: -1, Name: AttestationLimitName, By: []KeyPart{PartIP}, Rate: n, Period: period, RateText: text,
		Burst: max(n, 1), Kind: KindBucket, Line: line}
}

// apple parses `risk.attestation.apple`.
func (ps *parser) apple(f field) (*AppleAttestation, bool) {
	m := ps.mapping(f.val, f.name, appleFields)
	if m == nil {
		return nil, false
	}
	ok := ps.require(m, "apple", "app_id", "root_ca_file")
	a := &AppleAttestation{Environment: "production"}
	for _, g := range m.fields {
		good := true
		switch g.name {
		case "app_id":
			var s string
			if s, good = ps.str(g); good && !validAppID(s) {
				ps.errorf(g.val, "app_id %q: want TEAMID.bundle.id", s)
				good = false
			}
			a.AppID = s
		case "environment":
			a.Environment, good = ps.oneOf(g, "production", "development")
		case "root_ca_file":
			a.RootCAFile, good = ps.existingFile(g)
			a.RootCAFileLine = g.val.Line
		}
		ok = ok && good
	}
	return a, ok
}

// validAppID reports whether s looks like "TEAMID.bundle.id".
func validAppID(s string) bool {
	team, bundle, found := strings.Cut(s, ".")
	if !found || team == "" || bundle == "" || strings.HasPrefix(bundle, ".") || strings.HasSuffix(bundle, ".") {
		return false
	}
	for i := 0; i < len(team); i++ {
		c := team[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	for i := 0; i < len(bundle); i++ {
		c := bundle[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// android parses `risk.attestation.android`.
func (ps *parser) android(f field) (*AndroidAttestation, bool) {
	m := ps.mapping(f.val, f.name, androidFields)
	if m == nil {
		return nil, false
	}
	ok := ps.require(m, "android", "package_name", "decryption_key_env", "verification_key_env")
	a := &AndroidAttestation{MaxAge: DefaultAndroidMaxAge}
	for _, g := range m.fields {
		good := true
		switch g.name {
		case "package_name":
			var s string
			if s, good = ps.str(g); good && !validPackage(s) {
				ps.errorf(g.val, "package_name %q: want a Java package name like com.example.app", s)
				good = false
			}
			a.PackageName = s
		case "decryption_key_env":
			a.DecryptionKeyEnv, good = ps.envName(g)
			a.DecryptionKeyEnvLine = g.val.Line
		case "verification_key_env":
			a.VerificationKeyEnv, good = ps.envName(g)
			a.VerificationKeyEnvLine = g.val.Line
		case "max_age":
			a.MaxAge, good = ps.duration(g)
		case "require_strong_integrity":
			a.RequireStrongIntegrity, good = ps.boolean(g)
		}
		ok = ok && good
	}
	return a, ok
}

// validPackage reports whether s is a dotted Java package name.
func validPackage(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || c == '_' || i > 0 && '0' <= c && c <= '9') {
				return false
			}
		}
	}
	return true
}

// repeatOffender parses `risk.repeat_offender`.
func (ps *parser) repeatOffender(f field) *RepeatOffender {
	m := ps.mapping(f.val, f.name, repeatOffenderField)
	if m == nil {
		return nil
	}
	r := &RepeatOffender{PerMinute: DefaultRepeatOffenderPerMinute}
	if g, has := m.get("per_minute"); has {
		x, ok := ps.intRange(g, 1, maxThreshold)
		if !ok {
			return nil
		}
		r.PerMinute = x
	}
	return r
}
