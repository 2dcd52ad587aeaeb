package policy

import (
	"reflect"
	"testing"
)

func TestParseEnvoy(t *testing.T) {
	t.Parallel()
	p, err := Parse("p.yaml", []byte(head+`envoy:
  domain: mobile-api
  entries:
    remote_address: ip
    user_id: user
    x-device-id: device
    account: account
    path: endpoint_path
    method: endpoint_method
    plan: attr:plan
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Envoy{Domain: "mobile-api", Line: 6, Entries: map[string]EnvoyTarget{
		"remote_address": {Field: EnvoyIP}, "user_id": {Field: EnvoyUser}, "x-device-id": {Field: EnvoyDevice},
		"account": {Field: EnvoyAccount}, "path": {Field: EnvoyPath}, "method": {Field: EnvoyMethod},
		"plan": {Field: EnvoyAttr, Attr: "plan"},
	}}
	if !reflect.DeepEqual(p.Envoy, want) {
		t.Fatalf("envoy = %+v\nwant %+v", p.Envoy, want)
	}
	if p, err := Parse("p.yaml", []byte(head)); err != nil || p.Envoy != nil {
		t.Fatalf("no section: %v %v", p.Envoy, err)
	}
	if EnvoyPath.String() != "endpoint_path" || EnvoyAttr.String() != "attr" {
		t.Fatal("EnvoyField.String")
	}
}

func TestParseEnvoyErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"not a mapping", "envoy: [a]\n", `p.yaml:6: envoy: want a mapping, got a list`},
		{"missing domain", "envoy:\n  entries: {a: ip}\n", `p.yaml:7: envoy: missing required field "domain"`},
		{"missing entries", "envoy:\n  domain: d\n", `p.yaml:7: envoy: missing required field "entries"`},
		{"unknown field", "envoy:\n  domain: d\n  entries: {a: ip}\n  stage: 1\n", `p.yaml:9: unknown field "stage" (want one of domain, entries)`},
		{"bad domain", "envoy:\n  domain: \"a b\"\n  entries: {a: ip}\n", `p.yaml:7: envoy domain "a b": want 1-128 printable characters without spaces`},
		{"empty entries", "envoy:\n  domain: d\n  entries: {}\n", `p.yaml:8: envoy entries: must not be empty (map descriptor entry keys to ip, user, device, account, endpoint_method, endpoint_path or attr:NAME)`},
		{"entries a list", "envoy:\n  domain: d\n  entries: [ip]\n", `p.yaml:8: envoy entries: want a mapping, got a list`},
		{"unknown target", "envoy:\n  domain: d\n  entries:\n    remote_address: ip\n    user_id: usr\n",
			`p.yaml:10: envoy entries: user_id: "usr" is not a request field (want account, device, endpoint_method, endpoint_path, ip, user or attr:NAME, NAME 1-32 of a-z 0-9 _)`},
		{"bad attr", "envoy:\n  domain: d\n  entries:\n    plan: attr:Plan\n",
			`p.yaml:9: envoy entries: plan: "attr:Plan" is not a request field (want account, device, endpoint_method, endpoint_path, ip, user or attr:NAME, NAME 1-32 of a-z 0-9 _)`},
		{"target not a string", "envoy:\n  domain: d\n  entries:\n    a: [ip]\n", `p.yaml:9: a: want a value, got a list`},
		{"duplicate key", "envoy:\n  domain: d\n  entries:\n    a: ip\n    a: user\n", `p.yaml:10: duplicate key "a" (first at line 9)`},
		{"bad key", "envoy:\n  domain: d\n  entries:\n    \"a b\": ip\n", `p.yaml:9: envoy entries: key "a b": want 1-128 printable characters without spaces`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("p.yaml", []byte(head+tt.yaml))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got  %v\nwant %s", err, tt.want)
			}
		})
	}
}
