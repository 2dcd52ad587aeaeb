package attack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/service"
)

// withDeviceAllowList runs the target on trustPolicy (device tokens verify)
// with "vip-phone" on an allow list of devices.
func withDeviceAllowList(t *testing.T) setup {
	return func(c *service.Config) {
		dir := filepath.Dir(c.ConfigPath)
		if err := os.WriteFile(filepath.Join(dir, "vip.txt"), []byte("vip-phone\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		pol := strings.Replace(trustPolicy, "risk:\n", "lists:\n  vip: {file: vip.txt, kind: device}\nallow: [vip]\nrisk:\n", 1)
		if err := os.WriteFile(c.ConfigPath, []byte(pol), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Attack: the attacker copies the device id of an allow-listed phone
// (the app sends it in the clear) into its own requests, without the
// phone's device token: the device list matched the bare id, so ten
// guesses at alice's password against a 5/min login limit were all let
// through, exempt from every limit.
// Defence (7.1): a device allow list matches only a request presenting a
// valid device token for that device; a bare claim of the id is limited
// like any other request. The phone itself, with its token, stays exempt.
func TestAttackCopiedAllowListedDeviceID(t *testing.T) {
	t.Parallel()
	tg := start(t, withDeviceAllowList(t))
	limited := 0
	for i := 0; i < 10; i++ {
		status, c := tg.login(t, fmt.Sprintf("203.0.113.%d", 10+i), "alice", "guess", "X-Device-Id", "vip-phone")
		switch {
		case status == 429 && c == "RATE_LIMITED":
			limited++
		case status != 401:
			t.Fatalf("guess %d with the copied id: %d %s; want 401 from the upstream or 429 RATE_LIMITED", i, status, c)
		}
	}
	if n := tg.up.attemptsOn("alice"); n != 5 || limited != 5 {
		t.Fatalf("%d guesses with the copied device id reached the upstream, %d were limited; want 5 and 5 (login-account is 5/min)", n, limited)
	}
	tok := deviceToken(t, "vip-phone")
	for i := 0; i < 10; i++ {
		if status, c := tg.login(t, "198.51.100.10", "bob", "right", "X-Device-Id", "vip-phone", "X-Device-Token", tok); status != 200 {
			t.Fatalf("the allow-listed phone's login %d with its token: %d %s; want 200 (exempt from the limits)", i, status, c)
		}
	}
}
