package deploy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/service"
)

// daemonsDir holds limiter and riskd, built once for the package's tests
// (TestMain removes it).
var (
	daemonsDir  string
	daemonsErr  error
	daemonsOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if daemonsDir != "" {
		_ = os.RemoveAll(daemonsDir)
	}
	os.Exit(code)
}

// buildDaemons builds limiter and riskd (once) and returns their directory.
func buildDaemons(t *testing.T) string {
	t.Helper()
	daemonsOnce.Do(func() {
		if daemonsDir, daemonsErr = os.MkdirTemp("", "tollgate-deploy-bin-"); daemonsErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", daemonsDir+string(filepath.Separator), "./cmd/limiter", "./cmd/riskd")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			daemonsErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if daemonsErr != nil {
		t.Fatal(daemonsErr)
	}
	return daemonsDir
}

// readEnvFile parses KEY=VALUE lines (comments and blank lines skipped).
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		env[k] = v
	}
	return env
}

// help runs BIN --help.
func help(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("%s --help: %v", bin, err)
	}
	return string(out)
}

// TestSystemdUnits checks deploy/systemd: both units pass systemd-analyze
// verify (where installed), start the daemons with no flags (settings come
// from the env files), and the limiter validates first; every variable of
// the env files is one the daemon lists in --help; and limiter validate
// passes with the example env file (its policy replaced by
// policy/example.yaml).
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	bin := buildDaemons(t)
	units := map[string]string{"limiter": "systemd/tollgate-limiter@.service", "riskd": "systemd/tollgate-riskd@.service"}
	for daemon, unit := range units {
		b, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, want := range []string{
			"ExecStart=/usr/local/bin/" + daemon + "\n",
			"EnvironmentFile=/etc/tollgate/" + daemon + ".env\n",
			"EnvironmentFile=-/etc/tollgate/" + daemon + "-%i.env\n",
			"RestartPreventExitStatus=2\n", "KillSignal=SIGTERM\n", "DynamicUser=yes\n",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", unit, want)
			}
		}
		if daemon == "limiter" && !strings.Contains(text, "ExecStartPre=/usr/local/bin/limiter validate\n") {
			t.Errorf("%s: the limiter validates before it starts", unit)
		}
		// systemd kills what has not stopped by TimeoutStopSec: the
		// limiter's listeners drain together (up to --shutdown-timeout,
		// default 10s), then its publisher flushes (2.25s), the risk
		// engine stops and the store closes, so a stop must be given the
		// timeout and 10s more, or a SIGKILL loses the decisions still
		// queued; not much more, or a stuck stop holds a restart for
		// nothing (it was 45s while the drains ran in turn)
		if m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)$`).FindStringSubmatch(text); m == nil {
			t.Errorf("%s sets no TimeoutStopSec", unit)
		} else if secs, _ := strconv.Atoi(m[1]); daemon == "limiter" {
			drain := int(service.DefaultShutdownTimeout / time.Second)
			if secs < drain+10 {
				t.Errorf("%s: TimeoutStopSec=%d is less than a drain of --shutdown-timeout (%ds) and the flush", unit, secs, drain)
			} else if secs > 2*drain+10 {
				t.Errorf("%s: TimeoutStopSec=%d is far more than one drain (%ds, the listeners drain together) and the flush: a stuck stop holds a restart that long", unit, secs, drain)
			}
		}
		if !strings.Contains(text, "ExecReload=/bin/kill -HUP $MAINPID\n") {
			t.Errorf("%s: both daemons reload their policy on SIGHUP (systemctl reload)", unit)
		}
		verifyUnit(t, unit, strings.ReplaceAll(text, "/usr/local/bin/", bin+"/"))
	}

	// Every variable of the env files is a flag's variable of its daemon.
	lhelp, rhelp := help(t, filepath.Join(bin, "limiter")), help(t, filepath.Join(bin, "riskd"))
	for file, h := range map[string]string{"systemd/limiter.env": lhelp, "systemd/limiter-a.env": lhelp, "systemd/riskd.env": rhelp} {
		for k := range readEnvFile(t, file) {
			if !regexp.MustCompile(`\s` + k + `\s`).MatchString(h) {
				t.Errorf("%s sets %s, which --help does not list", file, k)
			}
		}
	}

	// limiter validate with the example env file exits 0.
	env := readEnvFile(t, "systemd/limiter.env")
	for k, v := range readEnvFile(t, "systemd/limiter-a.env") {
		env[k] = v
	}
	env["TOLLGATE_CONFIG"] = filepath.Join("..", "policy", "example.yaml")
	cmd := exec.Command(filepath.Join(bin, "limiter"), "validate")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "example.yaml: ok (") {
		t.Fatalf("limiter validate with deploy/systemd/limiter.env: %v\n%s", err, out)
	}
}

// verifyUnit runs systemd-analyze verify on an instance of the template
// unit (text, with the ExecStart binaries replaced by the built ones); any
// complaint fails the test. Without systemd-analyze it only logs.
func verifyUnit(t *testing.T, unit, text string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze not installed: %s not verified by it", unit)
		return
	}
	name := strings.Replace(filepath.Base(unit), "@.", "@test.", 1)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(sa, "verify", "--man=no", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out.String())
	}
}

// TestReadmeFlagTables: every flag in the README's limiter and riskd
// tables exists in that daemon's --help with the variable the table names
// and the default --help gives (where the table gives a value),
// and the README's commands use files that exist.
func TestReadmeFlagTables(t *testing.T) {
	t.Parallel()
	bin := buildDaemons(t)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	helps := map[string]string{"limiter": help(t, filepath.Join(bin, "limiter")), "riskd": help(t, filepath.Join(bin, "riskd"))}
	pair := regexp.MustCompile("`--([a-z0-9-]+)[^`]*` \\(`(TOLLGATE_[A-Z0-9_]+)`\\)")
	for daemon, h := range helps {
		start := strings.Index(text, "### "+daemon+" flags")
		if start < 0 {
			t.Fatalf("README has no %q section", "### "+daemon+" flags")
		}
		section := text[start+4:]
		if end := strings.Index(section, "\n### "); end >= 0 {
			section = section[:end]
		}
		found := pair.FindAllStringSubmatch(section, -1)
		if len(found) < 8 {
			t.Fatalf("%s flags: only %d flag (env) pairs found", daemon, len(found))
		}
		for _, m := range found {
			if !regexp.MustCompile(`(?m)^  --` + m[1] + `\b.*\s` + m[2] + `\s`).MatchString(h) {
				t.Errorf("README %s table: --%s (%s) is not in %s --help", daemon, m[1], m[2], daemon)
			}
		}
		if n := checkReadmeDefaults(t, daemon, section, h); n < 8 {
			t.Errorf("README %s table: only %d defaults compared with --help", daemon, n)
		} else {
			t.Logf("%s: %d defaults compared", daemon, n)
		}
	}
	for _, f := range regexp.MustCompile(`--config ([a-z/._-]+\.yaml)`).FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat(filepath.Join("..", f[1])); err != nil {
			t.Errorf("README uses %s, which does not exist: %v", f[1], err)
		}
	}
}

// checkReadmeDefaults: in a README flag table (section), the default
// column of a row agrees with the "(default V)" of each of its flags in
// --help (h), where the column gives a value per flag (a duration, a
// number, N GiB or a literal in backquotes; prose, such as "a free port",
// is not checked). It returns how many it compared.
func checkReadmeDefaults(t *testing.T, daemon, section, h string) int {
	t.Helper()
	n := 0
	flagRe := regexp.MustCompile("`--([a-z0-9-]+)")
	for _, row := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if len(cells) != 3 || !strings.HasPrefix(cells[0], "`--") {
			continue
		}
		flags, values := flagRe.FindAllStringSubmatch(cells[0], -1), strings.Split(cells[2], ", ")
		if len(flags) != len(values) {
			continue
		}
		for i, f := range flags {
			m := regexp.MustCompile(`(?m)^  --` + f[1] + `\s.*\(default ([^)]*)\)$`).FindStringSubmatch(h)
			readme, ok := readmeValue(values[i])
			if m == nil || !ok {
				continue
			}
			n++
			if !sameDefault(readme, m[1]) {
				t.Errorf("README %s table: --%s defaults to %q, --help says %q", daemon, f[1], readme, m[1])
			}
		}
	}
	return n
}

// readmeValue is a README default cell's value, and whether it is one
// (not prose).
func readmeValue(cell string) (string, bool) {
	cell = strings.TrimSpace(cell)
	if v, ok := strings.CutSuffix(cell, " GiB"); ok {
		var n int64
		if _, err := fmt.Sscanf(v, "%d", &n); err == nil {
			return fmt.Sprint(n << 30), true
		}
	}
	if strings.HasPrefix(cell, "`") && strings.HasSuffix(cell, "`") && strings.Count(cell, "`") == 2 {
		return strings.Trim(cell, "`"), true
	}
	if regexp.MustCompile(`^[0-9]+$`).MatchString(cell) {
		return cell, true
	}
	return "", false
}

// sameDefault compares two defaults, durations by their length (60s is 1m0s).
func sameDefault(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	if errA == nil && errB == nil {
		return da == db
	}
	return a == b
}
