package policy

import (
	"fmt"
	"strings"
	"testing"
)

// head is a valid start for the broken files below: one route class, auth.
const head = `version: 1
routes:
  - {match: "POST /login", class: auth}
limits:
  - {name: a, by: [ip], rate: 10/s}
`

// withRisk returns head plus a risk section.
func withRisk(risk string) string {
	return head + "risk:\n" + risk
}

func TestParseBrokenFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want string // the whole error text, FILE:LINE: ...
	}{
		// File level.
		{"empty file", "", `p.yaml:1: file is empty: want a mapping with at least version and limits`},
		{"only comments", "# nothing\n", `p.yaml:1: file is empty: want a mapping with at least version and limits`},
		{"top-level list", "- version: 1\n", `p.yaml:1: want a mapping with at least version and limits at the top, got a list`},
		{"yaml syntax", "version: 1\nlimits: [\n  {name: a\n", `p.yaml:3: invalid YAML: did not find expected ',' or '}'`},
		{"yaml unclosed list", "version: 1\nlimits: [a, b\n", `p.yaml:2: invalid YAML: did not find expected ',' or ']'`},
		{"yaml bad indentation", "version: 1\nlimits: x\n  y: z\n", `p.yaml:3: invalid YAML: mapping values are not allowed in this context`},
		{"yaml unknown anchor", "version: 1\nlimits: *nope\n", `p.yaml:2: invalid YAML: unknown anchor 'nope' referenced`},
		{"two documents", head + "---\nversion: 1\n", `p.yaml:6: only one YAML document is allowed (found a second one)`},
		{"unknown top field", head + "limitz: []\n", `p.yaml:6: unknown field "limitz" (want one of version, identity, routes, limits, failure_mode, risk, lists, allow, deny, envoy, alerting)`},
		{"duplicate top key", head + "version: 1\n", `p.yaml:6: duplicate key "version" (first at line 1)`},
		{"non-string key", head + "[a]: 1\n", `p.yaml:6: mapping key must be a string, got a list`},

		// version and limits.
		{"missing version", "limits:\n  - {name: a, by: [ip], rate: 1/s}\n", `p.yaml:1: missing required field "version"`},
		{"version 2", "version: 2\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:1: version 2: unsupported (want 1)`},
		{"version not int", "version: one\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:1: version: want an integer, got "one"`},
		{"missing limits", "version: 1\n", `p.yaml:1: missing required field "limits"`},
		{"empty limits", "version: 1\nlimits: []\n", `p.yaml:2: limits: must not be empty`},
		{"null limits", "version: 1\nlimits:\n", `p.yaml:2: limits: must not be empty`},
		{"limits is a mapping", "version: 1\nlimits:\n  a: {by: [ip], rate: 1/s}\n", `p.yaml:3: limits: want a list, got a mapping`},
		{"limit is a string", "version: 1\nlimits:\n  - global\n", `p.yaml:3: limits entry: want a mapping, got "global"`},

		// One limit.
		{"limit missing rate", "version: 1\nlimits:\n  - name: a\n    by: [ip]\n", `p.yaml:3: limit: missing required field "rate" (or "quota", or "concurrency")`},
		{"limit missing name and by", "version: 1\nlimits:\n  - {rate: 1/s}\n", "p.yaml:3: limit: missing required field \"name\"\np.yaml:3: limit: missing required field \"by\""},
		{"limit unknown field", head + "  - {name: b, by: [ip], rat: 1/s, rate: 1/s}\n", `p.yaml:6: unknown field "rat" (want one of name, by, rate, burst, quota, concurrency, lease_ttl, shadow, failure_mode, if, trusted_devices, local_share)`},
		{"limit trusted_devices", head + "  - {name: b, by: [account], rate: 1/s, trusted_devices: mine}\n", `p.yaml:6: trusted_devices "mine": want own or shared`},
		{"limit duplicate key", head + "  - name: b\n    by: [ip]\n    rate: 1/s\n    rate: 2/s\n", `p.yaml:9: duplicate key "rate" (first at line 8)`},
		{"duplicate limit name", head + "  - {name: a, by: [user], rate: 1/s}\n", `p.yaml:6: duplicate limit name "a" (first at line 5)`},
		{"bad limit name", head + "  - {name: \"b c\", by: [ip], rate: 1/s}\n", `p.yaml:6: name "b c": want 1-64 characters of A-Z a-z 0-9 _ . -`},
		{"long limit name", head + "  - {name: " + strings.Repeat("x", 65) + ", by: [ip], rate: 1/s}\n", `p.yaml:6: name "` + strings.Repeat("x", 65) + `": want 1-64 characters of A-Z a-z 0-9 _ . -`},
		{"rate bad unit", head + "  - {name: b, by: [ip], rate: 10/week}\n", `p.yaml:6: rate "10/week": want N/s, N/min, N/h or N/day (N a positive number)`},
		{"rate no unit", head + "  - {name: b, by: [ip], rate: 10}\n", `p.yaml:6: rate "10": want N/s, N/min, N/h or N/day (N a positive number)`},
		{"rate zero", head + "  - {name: b, by: [ip], rate: 0/s}\n", `p.yaml:6: rate "0/s": N must be positive`},
		{"rate negative", head + "  - {name: b, by: [ip], rate: -1/s}\n", `p.yaml:6: rate "-1/s": want N/s, N/min, N/h or N/day (N a positive number)`},
		{"rate too large", head + "  - {name: b, by: [ip], rate: 2000000000/s}\n", `p.yaml:6: rate "2000000000/s": N must be at most 1e+09`},
		{"rate is a list", head + "  - {name: b, by: [ip], rate: [1/s]}\n", `p.yaml:6: rate: want a value, got a list`},
		{"by empty", head + "  - {name: b, by: [], rate: 1/s}\n", `p.yaml:6: by: must not be empty`},
		{"by not a list", head + "  - {name: b, by: ip, rate: 1/s}\n", `p.yaml:6: by: want a list, got "ip"`},
		{"by unknown part", head + "  - {name: b, by: [ip, cookie], rate: 1/s}\n", `p.yaml:6: by "cookie": want global, ip, user, device, account, asn, route or attr:NAME`},
		{"by duplicate part", head + "  - {name: b, by: [ip, ip], rate: 1/s}\n", `p.yaml:6: by: "ip" listed twice`},
		{"by global combined", head + "  - {name: b, by: [global, route], rate: 1/s}\n", `p.yaml:6: by: global cannot be combined with other key parts`},
		{"burst below 1", head + "  - {name: b, by: [ip], rate: 1/s, burst: 0.5}\n", `p.yaml:6: burst 0.5: must be at least 1 (a smaller bucket never holds a whole request)`},
		{"burst not a number", head + "  - {name: b, by: [ip], rate: 1/s, burst: lots}\n", `p.yaml:6: burst: want a number, got "lots"`},
		{"burst infinite", head + "  - {name: b, by: [ip], rate: 1/s, burst: .inf}\n", `p.yaml:6: burst: want a number, got ".inf"`},
		{"burst too large", head + "  - {name: b, by: [ip], rate: 1/s, burst: 1e10}\n", `p.yaml:6: burst 1e10: must be at most 1e+09`},
		{"shadow not bool", head + "  - {name: b, by: [ip], rate: 1/s, shadow: yes}\n", `p.yaml:6: shadow: want true or false, got "yes"`},
		{"limit failure mode", head + "  - {name: b, by: [ip], rate: 1/s, failure_mode: maybe}\n", `p.yaml:6: failure_mode "maybe": want open or closed`},
		{"if unknown class", head + "  - {name: b, by: [ip], rate: 1/s, if: {class: [auth, wirte]}}\n", `p.yaml:6: unknown class "wirte" (classes: auth, default)`},
		{"if unknown field", head + "  - {name: b, by: [ip], rate: 1/s, if: {auth: true}}\n", `p.yaml:6: unknown field "auth" (want one of authenticated, class, attr)`},
		{"if not bool", head + "  - {name: b, by: [ip], rate: 1/s, if: {authenticated: 1}}\n", `p.yaml:6: authenticated: want true or false, got "1"`},
		{"if empty class list", head + "  - {name: b, by: [ip], rate: 1/s, if: {class: []}}\n", `p.yaml:6: class: must not be empty`},
		{"if is a list", head + "  - {name: b, by: [ip], rate: 1/s, if: [auth]}\n", `p.yaml:6: if: want a mapping, got a list`},
		{"user on unauthenticated", head + "  - {name: b, by: [user], rate: 1/s, if: {authenticated: false}}\n", `p.yaml:6: by user: never present on unauthenticated requests, and this limit has if.authenticated: false`},

		// Routes.
		{"route without path", "version: 1\nroutes:\n  - {match: GET, class: read}\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:3: match "GET": want "METHOD /path" (METHOD may be *, the path a glob with *)`},
		{"route relative path", "version: 1\nroutes:\n  - {match: GET search, class: read}\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:3: match "GET search": path "search" must start with / (or be *)`},
		{"route bad method", "version: 1\nroutes:\n  - {match: \"GE(T /x\", class: read}\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:3: match "GE(T /x": method "GE(T" is not an HTTP method token`},
		{"route bad class", "version: 1\nroutes:\n  - {match: GET /x, class: Read}\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:3: class "Read": want 1-32 characters of a-z 0-9 _ -`},
		{"route missing class", "version: 1\nroutes:\n  - match: GET /x\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:3: route: missing required field "class"`},
		{"route unknown field", "version: 1\nroutes:\n  - {match: GET /x, class: read, limit: a}\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:3: unknown field "limit" (want one of match, class)`},
		{"routes is a mapping", "version: 1\nroutes: {match: GET /x}\nlimits: [{name: a, by: [ip], rate: 1/s}]\n", `p.yaml:2: routes: want a list, got a mapping`},

		// failure_mode.
		{"failure_mode unknown class", head + "failure_mode: {default: open, nope: closed}\n", `p.yaml:6: failure_mode: unknown class "nope" (classes: auth, default)`},
		{"failure_mode bad value", head + "failure_mode:\n  auth: shut\n", `p.yaml:7: auth "shut": want open or closed`},
		{"failure_mode is a string", head + "failure_mode: closed\n", `p.yaml:6: failure_mode: want a mapping, got "closed"`},

		// identity.
		{"identity is a list", head + "identity: [X-User-Id]\n", `p.yaml:6: identity: want a mapping, got a list`},
		{"account fields empty", head + "identity: {account_body_field: []}\n", `p.yaml:6: account_body_field: must not be empty`},
		{"account fields twice", head + "identity:\n  account_body_field: [email, Email]\n", `p.yaml:7: account_body_field: "Email" is listed twice (fields match ignoring case)`},
		{"account fields too many", head + "identity: {account_body_field: [a, b, c, d, e, f, g, h, i]}\n", `p.yaml:6: account_body_field: at most 8 fields, got 9`},
		{"account field a mapping", head + "identity: {account_body_field: [{a: b}]}\n", `p.yaml:6: account_body_field: want a value, got a mapping`},
		{"identity unknown field", head + "identity: {user_header: X-User-Id, ip_header: X-Real-Ip}\n", `p.yaml:6: unknown field "ip_header" (want one of trusted_proxies, user_header, user_signature_header, user_signature_key_env, user_signature_max_age, user_signature_require_timestamp, ipv6_prefix, device_header, device_token_header, account_body_field, account_header, account_response_header, attributes)`},
		{"trusted proxy bad cidr", head + "identity:\n  trusted_proxies: [10.0.0.0/8, 10.0.0.0/33]\n", `p.yaml:7: trusted_proxies "10.0.0.0/33": not a CIDR prefix or IP address`},
		{"trusted proxy not an ip", head + "identity:\n  trusted_proxies:\n    - proxy.local\n", `p.yaml:8: trusted_proxies "proxy.local": not a CIDR prefix or IP address`},
		{"header not a token", head + "identity: {user_header: \"X User\"}\n", `p.yaml:6: user_header "X User": not a valid HTTP header name`},
		{"key env without header", head + "identity:\n  user_signature_key_env: KEY\n", `p.yaml:7: user_signature_key_env is set but user_signature_header is not`},
		{"bad env name", head + "identity: {user_signature_header: X-Sig, user_signature_key_env: 1KEY}\n", `p.yaml:6: user_signature_key_env "1KEY": not a valid environment variable name`},

		// risk.velocity.
		{"risk unknown field", withRisk("  velocityy: []\n"), `p.yaml:7: unknown field "velocityy" (want one of velocity, anomaly, reputation, attestation, repeat_offender)`},
		{"risk is a list", head + "risk: []\n", `p.yaml:6: risk: want a mapping, got a list`},
		{"velocity missing fields", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m}\n"),
			"p.yaml:8: velocity rule: missing required field \"action\"\np.yaml:8: velocity rule: missing required field \"duration\""},
		{"velocity bad event", withRisk("  velocity:\n    - {name: v, event: Login, by: ip, threshold: 5, window: 1m, action: lockout, duration: 1m}\n"),
			`p.yaml:8: event "Login": want an event type of 1-64 characters [a-z][a-z0-9_]`},
		{"velocity event too long", withRisk("  velocity:\n    - {name: v, event: " + strings.Repeat("e", 65) + ", by: ip, threshold: 5, window: 1m, action: lockout, duration: 1m}\n"),
			`p.yaml:8: event "` + strings.Repeat("e", 65) + `": want an event type of 1-64 characters [a-z][a-z0-9_]`},
		{"velocity lockout by asn", withRisk("  velocity:\n    - {name: v, event: login_failed, by: asn, threshold: 5, window: 1m, action: lockout, duration: 1m}\n"),
			`p.yaml:8: by asn: action lockout locks only account, ip, user or device`},
		{"velocity step_up by attr", withRisk("  velocity:\n    - {name: v, event: otp_sent, by: attr:phone_prefix,\n       threshold: 5, window: 1m, action: step_up, duration: 1m}\n"),
			`p.yaml:8: by attr:phone_prefix: action step_up locks only account, ip, user or device`},
		{"velocity bad by", withRisk("  velocity:\n    - {name: v, event: login_failed, by: route, threshold: 5, window: 1m, action: tighten, multiplier: 0.5, duration: 1m}\n"),
			`p.yaml:8: by "route": want account, ip, user, device, asn or attr:NAME`},
		{"velocity bad attr", withRisk("  velocity:\n    - {name: v, event: otp_sent, by: attr:Phone, threshold: 5, window: 1m, action: block, duration: 1m}\n"),
			`p.yaml:8: by "attr:Phone": attribute name "Phone": want 1-32 characters of a-z 0-9 _`},
		{"velocity unknown class", withRisk("  velocity:\n    - {name: v, event: login_failed, by: device, threshold: 5, window: 1m, action: lockout, duration: 1m,\n       classes: [nope]}\n"),
			`p.yaml:9: unknown class "nope" (classes: auth, default)`},
		{"velocity classes on tighten", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: tighten, multiplier: 0.5,\n       duration: 1m, classes: [default]}\n"),
			`p.yaml:9: classes: only for action lockout or step_up, not tighten`},
		{"velocity block with multiplier", withRisk("  velocity:\n    - {name: v, event: signup, by: asn, threshold: 5, window: 1m, action: block, multiplier: 0.5, duration: 1m}\n"),
			`p.yaml:8: multiplier: only for action tighten, not block`},
		{"velocity threshold 0", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 0, window: 1m, action: lockout, duration: 1m}\n"),
			`p.yaml:8: threshold 0: must be between 1 and 1000000000`},
		{"velocity threshold float", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 2.5, window: 1m, action: lockout, duration: 1m}\n"),
			`p.yaml:8: threshold: want an integer, got "2.5"`},
		{"velocity bad window", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 10, action: lockout, duration: 1m}\n"),
			`p.yaml:8: window "10": want a duration like 30s, 10m or 24h`},
		{"velocity negative duration", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: lockout, duration: -1m}\n"),
			`p.yaml:8: duration "-1m": must be positive`},
		{"velocity bad action", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: ban, duration: 1m}\n"),
			`p.yaml:8: action "ban": want lockout, step_up, tighten or block`},
		{"velocity multiplier underflows", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: tighten, multiplier: 1e-999, duration: 1m}\n"),
			`p.yaml:8: multiplier 1e-999: too small for a float64, it would read as 0 (write 0 for 0)`},
		{"velocity tighten without multiplier", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: tighten, duration: 1m}\n"),
			`p.yaml:8: velocity rule: missing required field "multiplier" (action tighten)`},
		{"velocity multiplier out of range", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: tighten, duration: 1m,\n       multiplier: 1.5}\n"),
			`p.yaml:9: multiplier 1.5: must be between 0 and 1`},
		{"velocity multiplier on lockout", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: lockout, duration: 1m,\n       multiplier: 0.5}\n"),
			`p.yaml:9: multiplier: only for action tighten, not lockout`},
		{"velocity escalate factor", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: lockout, duration: 1m,\n       escalate: {factor: 0.5, max: 1h}}\n"),
			`p.yaml:9: factor 0.5: must be at least 1`},
		{"velocity escalate max too short", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: lockout, duration: 1h,\n       escalate: {factor: 2, max: 30m}}\n"),
			`p.yaml:9: escalate: max 30m0s is shorter than duration 1h0m0s`},
		{"velocity escalate missing max", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: lockout, duration: 1h,\n       escalate: {factor: 2}}\n"),
			`p.yaml:9: escalate: missing required field "max"`},
		{"velocity duplicate name", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: step_up, duration: 1m}\n    - {name: v, event: login_failed, by: account, threshold: 5, window: 1m, action: step_up, duration: 1m}\n"),
			`p.yaml:9: duplicate velocity rule name "v" (first at line 8)`},
		{"velocity exempt not bool", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: lockout, duration: 1m,\n       exempt_attested: sometimes}\n"),
			`p.yaml:9: exempt_attested: want true or false, got "sometimes"`},
		{"velocity shadow not bool", withRisk("  velocity:\n    - {name: v, event: login_failed, by: ip, threshold: 5, window: 1m, action: lockout, duration: 1m,\n       shadow: maybe}\n"),
			`p.yaml:9: shadow: want true or false, got "maybe"`},

		// risk.anomaly.
		{"anomaly factor 1", withRisk("  anomaly: {by: device, factor: 1, short_window: 10s, long_window: 10m, min_baseline: 1/s, multiplier: 0.5, duration: 1m}\n"),
			`p.yaml:7: factor 1: must be greater than 1`},
		{"anomaly windows", withRisk("  anomaly:\n    by: ip\n    factor: 10\n    short_window: 10m\n    long_window: 10m\n    min_baseline: 1/min\n    multiplier: 0.5\n    duration: 1m\n"),
			`p.yaml:10: short_window 10m0s: must be shorter than long_window 10m0s`},
		{"anomaly bad baseline", withRisk("  anomaly: {by: ip, factor: 10, short_window: 10s, long_window: 10m, min_baseline: 0.05, multiplier: 0.5, duration: 1m}\n"),
			`p.yaml:7: min_baseline "0.05": want N/s, N/min, N/h or N/day (N a positive number)`},
		{"anomaly bad by", withRisk("  anomaly: {by: route, factor: 10, short_window: 10s, long_window: 10m, min_baseline: 1/s, multiplier: 0.5, duration: 1m}\n"),
			`p.yaml:7: by "route": want device, ip, user or account`},
		{"anomaly missing duration", withRisk("  anomaly: {by: ip, factor: 10, short_window: 10s, long_window: 10m, min_baseline: 1/s, multiplier: 0.5}\n"),
			`p.yaml:7: anomaly: missing required field "duration"`},
		{"anomaly shadow not bool", withRisk("  anomaly:\n    by: ip\n    factor: 10\n    short_window: 10s\n    long_window: 10m\n    min_baseline: 1/min\n    multiplier: 0.5\n    duration: 1m\n    shadow: 1\n"),
			`p.yaml:15: shadow: want true or false, got "1"`},

		// risk.reputation.
		{"asn database missing", withRisk("  reputation:\n    asn_database: /nonexistent/GeoLite2-ASN.mmdb\n"),
			`p.yaml:8: asn_database "/nonexistent/GeoLite2-ASN.mmdb": no such file`},
		{"asn database is a dir", withRisk("  reputation:\n    asn_database: /\n"),
			`p.yaml:8: asn_database "/": is a directory`},
		{"reputation rule without target", withRisk("  reputation:\n    rules:\n      - {multiplier: 0.5, reason: x}\n"),
			`p.yaml:9: reputation rule: want asns, cidrs or both`},
		{"reputation asn 0", withRisk("  reputation:\n    rules:\n      - {asns: [0], multiplier: 0.5}\n"),
			`p.yaml:9: asns 0: want an AS number between 1 and 4294967295`},
		{"reputation asn too big", withRisk("  reputation:\n    rules:\n      - {asns: [4294967296], multiplier: 0.5}\n"),
			`p.yaml:9: asns 4294967296: want an AS number between 1 and 4294967295`},
		{"reputation asn not a number", withRisk("  reputation:\n    rules:\n      - {asns: [AS13335], multiplier: 0.5}\n"),
			`p.yaml:9: asns: want an integer, got "AS13335"`},
		{"reputation bad cidr", withRisk("  reputation:\n    rules:\n      - {cidrs: [203.0.113.0/24, 300.1.2.3], multiplier: 0.5}\n"),
			`p.yaml:9: cidrs "300.1.2.3": not a CIDR prefix or IP address`},
		{"reputation negative multiplier", withRisk("  reputation:\n    rules:\n      - {cidrs: [203.0.113.0/24], multiplier: -1}\n"),
			`p.yaml:9: multiplier -1: must not be negative`},
		{"reputation missing multiplier", withRisk("  reputation:\n    rules:\n      - {cidrs: [203.0.113.0/24]}\n"),
			`p.yaml:9: reputation rule: missing required field "multiplier"`},

		// risk.attestation.
		{"attestation verified below 1", withRisk("  attestation: {verified_multiplier: 0.5}\n"),
			`p.yaml:7: verified_multiplier 0.5: must be at least 1`},
		{"attestation unverified above 1", withRisk("  attestation: {unverified_multiplier: 2}\n"),
			`p.yaml:7: unverified_multiplier 2: must be between 0 and 1`},
		{"attestation trusted_for", withRisk("  attestation: {trusted_for: 30d}\n"),
			`p.yaml:7: trusted_for "30d": want a duration like 30s, 10m or 24h`},
		{"attestation max_per_ip no period", withRisk("  attestation: {max_per_ip: 20}\n"),
			`p.yaml:7: max_per_ip "20": want N/s, N/min, N/h or N/day (N a positive number) (or off)`},
		{"attestation max_per_ip zero", withRisk("  attestation: {max_per_ip: 0/h}\n"),
			`p.yaml:7: max_per_ip "0/h": N must be positive (or off)`},
		{"attestation max_per_ip list", withRisk("  attestation: {max_per_ip: [20/h]}\n"),
			`p.yaml:7: max_per_ip: want a value, got a list`},
		{"limit named like max_per_ip's", head + "  - {name: attestation-ip, by: [ip], rate: 1/s}\n",
			`p.yaml:6: name "attestation-ip": reserved for the limit of risk.attestation.max_per_ip`},
		{"attestation valid_for", withRisk("  attestation: {valid_for: 1 day}\n"),
			`p.yaml:7: valid_for "1 day": want a duration like 30s, 10m or 24h`},
		{"apple missing root ca", withRisk("  attestation:\n    apple: {app_id: TEAMID.com.example.app}\n"),
			`p.yaml:8: apple: missing required field "root_ca_file"`},
		{"apple root ca missing file", withRisk("  attestation:\n    apple:\n      app_id: TEAMID.com.example.app\n      root_ca_file: /nonexistent/root.pem\n"),
			`p.yaml:10: root_ca_file "/nonexistent/root.pem": no such file`},
		{"apple bad app id", withRisk("  attestation:\n    apple: {app_id: com_example, root_ca_file: /}\n"),
			"p.yaml:8: app_id \"com_example\": want TEAMID.bundle.id\np.yaml:8: root_ca_file \"/\": is a directory"},
		{"apple bad environment", withRisk("  attestation:\n    apple: {app_id: T.a, environment: sandbox, root_ca_file: /nonexistent/x}\n"),
			"p.yaml:8: environment \"sandbox\": want production or development\np.yaml:8: root_ca_file \"/nonexistent/x\": no such file"},
		{"android missing key env", withRisk("  attestation:\n    android: {package_name: com.example.app, decryption_key_env: DEC}\n"),
			`p.yaml:8: android: missing required field "verification_key_env"`},
		{"android bad package", withRisk("  attestation:\n    android: {package_name: com..app, decryption_key_env: D, verification_key_env: V}\n"),
			`p.yaml:8: package_name "com..app": want a Java package name like com.example.app`},
		{"android bad max_age", withRisk("  attestation:\n    android: {package_name: a.b, decryption_key_env: D, verification_key_env: V, max_age: 0s}\n"),
			`p.yaml:8: max_age "0s": must be positive`},

		// risk.repeat_offender.
		{"repeat offender zero", withRisk("  repeat_offender: {per_minute: 0}\n"),
			`p.yaml:7: per_minute 0: must be between 1 and 1000000000`},
		{"repeat offender unknown field", withRisk("  repeat_offender: {per_hour: 10}\n"),
			`p.yaml:7: unknown field "per_hour" (want one of per_minute)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse("p.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded, want error:\n%s", tt.want)
			}
			if p != nil {
				t.Errorf("Parse returned a policy along with an error")
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestSyntaxErrorLine: a YAML syntax error is reported at the offending
// line, not at the start of the block around it.
func TestSyntaxErrorLine(t *testing.T) {
	t.Parallel()
	// limits returns n limits of three lines each (the first on line 3),
	// the last one's rate on line 3n+2 indented by indent spaces.
	limits := func(n, indent int) string {
		var b strings.Builder
		b.WriteString("version: 1\nlimits:\n")
		for i := 1; i <= n; i++ {
			rateIndent := "    "
			if i == n {
				rateIndent = strings.Repeat(" ", indent)
			}
			fmt.Fprintf(&b, "  - name: l%d\n    by: [ip]\n%srate: 1/s\n", i, rateIndent)
		}
		b.WriteString("failure_mode: {default: open}\n")
		return b.String()
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"rate indented 3 of 20", limits(20, 3), `p.yaml:62: invalid YAML: did not find expected '-' indicator`},
		{"rate indented 3 of 1", limits(1, 3), `p.yaml:5: invalid YAML: did not find expected '-' indicator`},
		{"rate indented 5 of 7", limits(7, 5), `p.yaml:23: invalid YAML: did not find expected key`},
		{"in a block mapping", "version: 1\nidentity:\n  user_header: X-User\n  device_header: X-Device\n   account_header: X-Account\nlimits: [{name: a, by: [ip], rate: 1/s}]\n",
			`p.yaml:5: invalid YAML: mapping values are not allowed in this context`},
		{"in a flow mapping", "version: 1\nlimits:\n  - {name: a,\n     by: [ip],\n     rate: 1/s\n     burst: 2}\n",
			`p.yaml:6: invalid YAML: did not find expected ',' or '}'`},
		{"flow sequence unclosed at the end", "version: 1\nlimits: [\n  {name: a, by: [ip], rate: 1/s},\n  {name: b, by: [ip], rate: 1/s}\n",
			`p.yaml:2: invalid YAML: did not find expected ',' or ']'`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("p.yaml", []byte(c.yaml))
			if err == nil || err.Error() != c.want {
				t.Errorf("Parse = %v\nwant %s", err, c.want)
			}
		})
	}
}
