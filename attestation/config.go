package attestation

import (
	"errors"
	"fmt"

	"github.com/tollgate-dev/tollgate/policy"
)

// FromPolicy builds the verifiers of the policy's `risk.attestation`:
// Apple's root is read from apple.root_ca_file, the Play Integrity keys
// from the environment variables android names (through getenv, e.g.
// os.Getenv). A platform the policy does not configure is nil. Errors
// begin with source:LINE (source is the policy file's name) and the field,
// name the file or variable, never a key, and are all reported at once
// (errors.Join).
func FromPolicy(source string, p *policy.Attestation, getenv func(string) string) (*Apple, *Play, error) {
	if p == nil {
		return nil, nil, nil
	}
	at := func(line int, field string, err error) error {
		return fmt.Errorf("%s:%d: risk.attestation.%s: %w", source, line, field, err)
	}
	var apple *Apple
	var errs []error
	if pa := p.Apple; pa != nil {
		roots, err := LoadAppleRoot(pa.RootCAFile)
		if err != nil {
			errs = append(errs, at(pa.RootCAFileLine, "apple.root_ca_file", err))
		} else {
			apple = &Apple{AppID: pa.AppID, Environment: pa.Environment, Roots: roots}
			if err := apple.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	var play *Play
	if pa := p.Android; pa != nil {
		dk, err := fromEnv(getenv, pa.DecryptionKeyEnv, ParsePlayDecryptionKey)
		if err != nil {
			errs = append(errs, at(pa.DecryptionKeyEnvLine, "android.decryption_key_env", err))
		}
		vk, err2 := fromEnv(getenv, pa.VerificationKeyEnv, ParsePlayVerificationKey)
		if err2 != nil {
			errs = append(errs, at(pa.VerificationKeyEnvLine, "android.verification_key_env", err2))
		}
		if err == nil && err2 == nil {
			play = &Play{PackageName: pa.PackageName, DecryptionKey: dk, VerificationKey: vk, MaxAge: pa.MaxAge, RequireStrong: pa.RequireStrongIntegrity}
			if err := play.Validate(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return apple, play, nil
}

// fromEnv parses the key held by the environment variable name; an empty
// or unset variable is an error naming it.
func fromEnv[K any](getenv func(string) string, name string, parse func(string) (K, error)) (K, error) {
	v := getenv(name)
	if v == "" {
		var none K
		return none, fmt.Errorf("environment variable %s is empty or unset", name)
	}
	k, err := parse(v)
	if err != nil {
		return k, fmt.Errorf("environment variable %s: %w", name, err)
	}
	return k, nil
}
