package service

import (
	"strings"
	"testing"
)

// TestAdminForgetsAttestation (docs/attestation.md): a device id whose
// owner lost both the App Attest key and the last device token is held by
// its attestation; an operator frees it with DELETE
// /v1/admin/attestations/{device_id} (the admin token required, audited),
// and the owner's new key then attests it and gets a token.
func TestAdminForgetsAttestation(t *testing.T) {
	t.Parallel()
	ca, root := testCA(t)
	_, base := start(t, Config{ConfigPath: attackPolicy(t, root), AdminToken: "tok"})
	if st, body, _ := attestAppleAs(t, base, ca, "d-owner", ""); st != 200 || deviceTokenOf(body) == "" {
		t.Fatalf("the owner's first attestation: %d %s", st, body)
	}
	if st, body, _ := attestAppleAs(t, base, ca, "d-owner", ""); st != 400 || !strings.Contains(body, `"step":"device"`) {
		t.Fatalf("a new key without the last token, before the release: %d %s", st, body)
	}
	if code, body := adminDo(t, "DELETE", base+"/v1/admin/attestations/d-owner", "wrong", ""); code != 401 {
		t.Fatalf("without the admin token: %d %s", code, body)
	}
	if code, body := adminDo(t, "DELETE", base+"/v1/admin/attestations/d-owner", "tok", ""); code != 200 || !strings.Contains(body, `"device_id":"d-owner","cleared":true`) {
		t.Fatalf("release: %d %s", code, body)
	}
	if code, body := adminDo(t, "DELETE", base+"/v1/admin/attestations/d-owner", "tok", ""); code != 200 || !strings.Contains(body, `"cleared":false`) {
		t.Fatalf("release again: %d %s", code, body)
	}
	if code, body := adminDo(t, "DELETE", base+"/v1/admin/attestations/"+strings.Repeat("x", 300), "tok", ""); code != 400 || !strings.Contains(body, "BAD_REQUEST") {
		t.Fatalf("a bad id: %d %s", code, body)
	}
	if code, body := adminDo(t, "GET", base+"/v1/admin/subjects/device/d-owner", "tok", ""); code != 200 || !strings.Contains(body, `"attestation":null`) {
		t.Fatalf("the device's view after the release: %d %s", code, body)
	}
	if st, body, _ := attestAppleAs(t, base, ca, "d-owner", ""); st != 200 || deviceTokenOf(body) == "" {
		t.Fatalf("the owner's new key after the release: %d %s", st, body)
	}
	eventually(t, 5e9, func() string {
		if _, body := adminDo(t, "GET", base+"/v1/admin/audit", "tok", ""); !strings.Contains(body, `"action":"attestation_forget","subject":"device","id":"d-owner"`) {
			return "no attestation_forget in the audit trail: " + body
		}
		return ""
	})
}
