// Package attestation verifies that a request comes from a genuine copy of
// the app on a genuine device, fully offline, and remembers the result.
//
// Two platforms are supported:
//
//   - Apple App Attest (Apple): the app generates a key in the Secure
//     Enclave, asks Apple to attest it over a hash of a server challenge,
//     and sends the attestation object. VerifyAttestation checks it against
//     Apple's pinned App Attestation root CA and returns the attested public
//     key; later requests prove possession of that key with assertions
//     (VerifyAssertion), whose counter must increase.
//   - Google Play Integrity (Play): the app asks Play for an integrity token
//     with the server challenge as nonce. Verify decrypts the token (JWE,
//     A256KW + A256GCM) and checks its signature (JWS, ES256) with the keys
//     from the Play Console, then checks package, nonce, age and verdicts.
//
// Every failed check returns an *Error whose Step names the check, so a
// caller can tell the app (and its operators) exactly what was wrong.
//
// Challenges hands out one-time, five-minute challenges bound to a device
// id; Devices remembers each device's attestation Status (and the App
// Attest key needed for assertions). Both come as a Redis implementation
// (shared by every limiter replica) and a bounded in-process one.
//
// Tokens issues and verifies device tokens (contract 6.3): after a
// successful attestation or assertion the app gets a token HMAC-bound to
// its device id and expiring with the attestation, and presents it with
// every request. Any limiter host holding the same key verifies it without
// a store read; a device id without its token proves nothing.
//
// Nothing here reads the clock: every check takes now as a parameter.
package attestation
