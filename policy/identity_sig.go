package policy

import (
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// DefaultUserSignatureMaxAge is identity.user_signature_max_age when the
// policy does not set it (7.1).
const DefaultUserSignatureMaxAge = 5 * time.Minute

// userSignature parses one of the signed-user-header fields of the
// identity section (7.1): user_signature_key_env (a variable name or a
// list of them: any of their keys verifies, for key rotation),
// user_signature_max_age and user_signature_require_timestamp.
func (ps *parser) userSignature(g field, id *Identity) {
	switch g.name {
	case "user_signature_key_env":
		id.UserSignatureKeyEnvLine = g.val.Line
		if g.val.Kind != yaml.SequenceNode {
			if s, ok := ps.envName(g); ok {
				id.UserSignatureKeyEnvs = []string{s}
			}
			break
		}
		l, ok := ps.nonEmptyList(g)
		if !ok {
			break
		}
		for _, n := range l {
			s, ok := ps.envName(field{name: g.name, key: g.key, val: n})
			if !ok {
				continue
			}
			if slices.Contains(id.UserSignatureKeyEnvs, s) {
				ps.errorf(n, "%s: %s is listed twice", g.name, s)
				continue
			}
			id.UserSignatureKeyEnvs = append(id.UserSignatureKeyEnvs, s)
		}
	case "user_signature_max_age":
		if d, ok := ps.duration(g); ok {
			id.UserSignatureMaxAge = d
		}
	case "user_signature_require_timestamp":
		if b, ok := ps.boolean(g); ok {
			id.UserSignatureRequireTimestamp = b
		}
	}
	if len(id.UserSignatureKeyEnvs) > 0 {
		id.UserSignatureKeyEnv = id.UserSignatureKeyEnvs[0]
	}
}

// checkUserSignature checks the signed-user-header fields together: a
// key needs the header that carries the signature, and the signature's
// age and form mean nothing without a key.
func (ps *parser) checkUserSignature(m *mapping, id *Identity) {
	if g, ok := m.get("user_signature_key_env"); ok && id.UserSignatureHeader == "" {
		ps.errorf(g.val, "user_signature_key_env is set but user_signature_header is not")
	}
	for _, name := range []string{"user_signature_max_age", "user_signature_require_timestamp"} {
		if g, ok := m.get(name); ok && id.UserSignatureKeyEnv == "" {
			ps.errorf(g.key, "%s is set but user_signature_key_env is not (no signature is checked)", name)
		}
	}
	if id.UserSignatureKeyEnv != "" && id.UserSignatureMaxAge == 0 {
		id.UserSignatureMaxAge = DefaultUserSignatureMaxAge
	}
}
