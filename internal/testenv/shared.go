package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// RequireSharedEnv is the environment variable that makes tests of data
// outside the repository (../shared beside the checkout) fail instead of
// skip when the data is absent. CI sets it (.ci/run), so CI always runs them.
const RequireSharedEnv = "TOLLGATE_REQUIRE_SHARED"

// RequireShared returns whether the tests must not skip for missing
// shared data or tools: TOLLGATE_REQUIRE_SHARED is set (not "" or "0").
func RequireShared() bool {
	v := os.Getenv(RequireSharedEnv)
	return v != "" && v != "0"
}

// Shared checks that path (data outside the repository, such as
// ../../shared/attestation) exists. When it does not, the test is skipped
// with a message naming the path, or fails when RequireShared.
func Shared(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	if RequireShared() {
		t.Fatalf("shared test data %s is missing (%s is set: tests of shared data must run)", abs, RequireSharedEnv)
	}
	t.Skipf("shared test data %s is missing: skipped (it lives beside the checkout, not in it; set %s=1 to make this a failure)", abs, RequireSharedEnv)
}
