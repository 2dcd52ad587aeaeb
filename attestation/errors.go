package attestation

import "errors"

// Step names of Error. A failed verification names the first check that
// did not pass.
const (
	StepDecode           = "decode"            // the object, assertion or payload is not what it should be
	StepFormat           = "format"            // fmt is not apple-appattest, or authData lacks attested data
	StepCertificateChain = "certificate chain" // x5c does not chain to the pinned root at now
	StepNonce            = "nonce"             // nonce (Apple) or requestDetails.nonce (Play) mismatch
	StepPublicKey        = "public key"        // the leaf key is not P-256, or differs from authData's key
	StepKeyID            = "key id"            // SHA-256 of the leaf's public key is not the key id
	StepRPID             = "rp id"             // rpIdHash is not SHA-256 of the app id
	StepCounter          = "counter"           // attestation counter not 0, or assertion counter not increasing
	StepAAGUID           = "aaguid"            // aaguid does not match the environment
	StepCredentialID     = "credential id"     // credentialId is not the key id
	StepChallenge        = "challenge"         // unknown, expired or already used challenge
	StepSignature        = "signature"         // the assertion's signature does not verify
	StepDecrypt          = "decrypt"           // the Play Integrity token cannot be decrypted
	StepVerifySignature  = "verify signature"  // the Play Integrity JWS does not verify
	StepPackageName      = "package name"      // the verdict is for another package
	StepTimestamp        = "timestamp"         // the verdict is too old or in the future
	StepAppVerdict       = "app verdict"       // appRecognitionVerdict is not PLAY_RECOGNIZED
	StepDeviceVerdict    = "device verdict"    // deviceRecognitionVerdict lacks the required integrity
	StepDevice           = "device"            // the device id holds a valid attestation of another key, and no token of it came
)

// Error is a failed verification: Step names the check (one of the Step
// constants) and Err says what was wrong. Callers show Step and Err to the
// app; a store failure is never an *Error.
type Error struct {
	// Step is the failed check (StepNonce, ...).
	Step string
	// Err is what was wrong.
	Err error
}

// Error returns "attestation: <step>: <cause>".
func (e *Error) Error() string { return "attestation: " + e.Step + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Message returns "<step>: <cause>", the text shown to the app.
func (e *Error) Message() string { return e.Step + ": " + e.Err.Error() }

// fail returns an *Error for step with the message msg.
func fail(step, msg string) *Error { return &Error{Step: step, Err: errors.New(msg)} }

// failErr returns an *Error for step wrapping err.
func failErr(step string, err error) *Error { return &Error{Step: step, Err: err} }

// ErrNotConfigured reports a verifier used without its required settings
// (an Apple without AppID or Roots, a Play without keys).
var ErrNotConfigured = errors.New("attestation: verifier not configured")
