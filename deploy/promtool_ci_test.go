package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPromtoolRequiredUnderCI runs TestPromtool in a child `go test` whose
// PATH has no promtool: under CI (CI=true, or TOLLGATE_REQUIRE_SHARED=1 as
// .ci/run sets) it must fail, elsewhere skip saying why.
func TestPromtoolRequiredUnderCI(t *testing.T) {
	t.Parallel()
	if os.Getenv("TOLLGATE_PROMTOOL_CHILD") != "" {
		t.Skip("child run")
	}
	// The package's test binary, built with this environment, run with
	// a PATH that holds nothing.
	testBin := filepath.Join(t.TempDir(), "deploy.test")
	if out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "test", "-c", "-o", testBin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	empty := t.TempDir()
	run := func(extra ...string) (string, error) {
		cmd := exec.Command(testBin, "-test.count=1", "-test.v", "-test.run", "^TestPromtool$")
		cmd.Env = append([]string{"PATH=" + empty, "TOLLGATE_PROMTOOL_CHILD=1", "HOME=" + empty}, extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, ci := range []string{"CI=true", "TOLLGATE_REQUIRE_SHARED=1"} {
		out, err := run(ci)
		if err == nil || !strings.Contains(out, "promtool not installed, and this is CI") {
			t.Errorf("%s without promtool: err %v, want a failure:\n%s", ci, err, out)
		}
	}
	out, err := run()
	if err != nil || !strings.Contains(out, "--- SKIP: TestPromtool") || !strings.Contains(out, "promtool not installed") {
		t.Errorf("outside CI without promtool: err %v, want a skip:\n%s", err, out)
	}
}
