package attestation

import (
	"fmt"

	"github.com/tollgate-dev/tollgate/policy"
)

// FromPolicy builds the verifiers of the policy's `risk.attestation`:
// Apple's root is read from apple.root_ca_file, the Play Integrity keys
// from the environment variables android names (through getenv, e.g.
// os.Getenv). A platform the policy does not configure is nil. Errors name
// the file or variable, never a key.
func FromPolicy(p *policy.Attestation, getenv func(string) string) (*Apple, *Play, error) {
	if p == nil {
		return nil, nil, nil
	}
	var apple *Apple
	if pa := p.Apple; pa != nil {
		roots, err := LoadAppleRoot(pa.RootCAFile)
		if err != nil {
			return nil, nil, err
		}
		apple = &Apple{AppID: pa.AppID, Environment: pa.Environment, Roots: roots}
		if err := apple.Validate(); err != nil {
			return nil, nil, err
		}
	}
	var play *Play
	if pa := p.Android; pa != nil {
		dec, ver := getenv(pa.DecryptionKeyEnv), getenv(pa.VerificationKeyEnv)
		switch {
		case dec == "":
			return nil, nil, fmt.Errorf("attestation: android: environment variable %s (decryption_key_env) is empty", pa.DecryptionKeyEnv)
		case ver == "":
			return nil, nil, fmt.Errorf("attestation: android: environment variable %s (verification_key_env) is empty", pa.VerificationKeyEnv)
		}
		dk, vk, err := ParsePlayKeys(dec, ver)
		if err != nil {
			return nil, nil, fmt.Errorf("attestation: android: keys from %s and %s: %w", pa.DecryptionKeyEnv, pa.VerificationKeyEnv, err)
		}
		play = &Play{PackageName: pa.PackageName, DecryptionKey: dk, VerificationKey: vk, MaxAge: pa.MaxAge, RequireStrong: pa.RequireStrongIntegrity}
		if err := play.Validate(); err != nil {
			return nil, nil, err
		}
	}
	return apple, play, nil
}
