package policy

import (
	"reflect"
	"testing"
	"time"
)

// sigHead is a policy whose identity section the cases below complete.
const sigHead = "version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/s}\nidentity:\n  user_header: X-User-Id\n  user_signature_header: X-User-Signature\n"

func TestParseUserSignature(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		yaml    string
		envs    []string
		maxAge  time.Duration
		require bool
	}{
		{"one name", "  user_signature_key_env: K1\n", []string{"K1"}, DefaultUserSignatureMaxAge, false},
		{"a list: rotation", "  user_signature_key_env: [K_NEW, K_OLD]\n", []string{"K_NEW", "K_OLD"}, DefaultUserSignatureMaxAge, false},
		{"max age and required timestamp",
			"  user_signature_key_env: K1\n  user_signature_max_age: 90s\n  user_signature_require_timestamp: true\n",
			[]string{"K1"}, 90 * time.Second, true},
		{"no key", "", nil, 0, false},
	} {
		p, err := Parse("p.yaml", []byte(sigHead+c.yaml))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		id := p.Identity
		first := ""
		if len(c.envs) > 0 {
			first = c.envs[0]
		}
		if !reflect.DeepEqual(id.UserSignatureKeyEnvs, c.envs) || id.UserSignatureKeyEnv != first ||
			id.UserSignatureMaxAge != c.maxAge || id.UserSignatureRequireTimestamp != c.require {
			t.Errorf("%s: envs %q (first %q), max age %v, require %v; want %q, %v, %v",
				c.name, id.UserSignatureKeyEnvs, id.UserSignatureKeyEnv, id.UserSignatureMaxAge, id.UserSignatureRequireTimestamp, c.envs, c.maxAge, c.require)
		}
	}
}

func TestParseUserSignatureErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, yaml, want string }{
		{"empty list", "  user_signature_key_env: []\n", `p.yaml:7: user_signature_key_env: must not be empty`},
		{"bad name in list", "  user_signature_key_env: [K1, \"2K\"]\n", `p.yaml:7: user_signature_key_env "2K": not a valid environment variable name`},
		{"repeated name", "  user_signature_key_env:\n    - K1\n    - K1\n", `p.yaml:9: user_signature_key_env: K1 is listed twice`},
		{"max age not a duration", "  user_signature_key_env: K1\n  user_signature_max_age: 5\n", `p.yaml:8: user_signature_max_age "5": want a duration like 30s, 10m or 24h`},
		{"max age zero", "  user_signature_key_env: K1\n  user_signature_max_age: 0s\n", `p.yaml:8: user_signature_max_age "0s": must be positive`},
		{"require not a bool", "  user_signature_key_env: K1\n  user_signature_require_timestamp: yes please\n", `p.yaml:8: user_signature_require_timestamp: want true or false, got "yes please"`},
		{"max age without key", "  user_signature_max_age: 1m\n", `p.yaml:7: user_signature_max_age is set but user_signature_key_env is not (no signature is checked)`},
		{"require without key", "  user_signature_require_timestamp: true\n", `p.yaml:7: user_signature_require_timestamp is set but user_signature_key_env is not (no signature is checked)`},
	} {
		_, err := Parse("p.yaml", []byte(sigHead+c.yaml))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %s", c.name, err, c.want)
		}
	}
	// the key without the header that carries the signature
	_, err := Parse("p.yaml", []byte("version: 1\nlimits:\n  - {name: a, by: [ip], rate: 10/s}\nidentity:\n  user_signature_key_env: [K1, K2]\n"))
	if want := `p.yaml:5: user_signature_key_env is set but user_signature_header is not`; err == nil || err.Error() != want {
		t.Errorf("key without header: %v, want %s", err, want)
	}
}
