package policy

import (
	_ "embed"
	"sync"
)

//go:embed example.yaml
var example []byte

// builtinName is the file name errors in the embedded example would carry.
const builtinName = "example.yaml (built-in)"

// Example returns the built-in example policy file (a copy: the caller may
// modify it). It is the contract's example without the parts that need
// operator-supplied files or keys (the ASN database, Apple and Android
// attestation).
func Example() []byte {
	return append([]byte(nil), example...)
}

// defaultPolicy parses the embedded example once.
var defaultPolicy = sync.OnceValues(func() (*Policy, error) {
	p, err := Parse(builtinName, example)
	if err != nil {
		return nil, err
	}
	p.Source = ""
	return p, nil
})

// Default returns the built-in policy: Example, parsed. Its Source is "".
// The returned Policy is shared and must not be modified. Default panics
// only if the embedded file is broken, which a test rules out.
func Default() *Policy {
	p, err := defaultPolicy()
	if err != nil {
		panic("policy: built-in example policy is invalid: " + err.Error())
	}
	return p
}
