package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
)

// StartAlertmanager runs Debian's prometheus-alertmanager with the
// configuration conf (YAML) on a free loopback port, clustering off and
// its storage in a temp dir, and waits until it accepts; it is stopped by
// its process id at cleanup. The Gateway's Addr is its web address.
// Without the binary the test fails saying how to install it.
func StartAlertmanager(t testing.TB, conf string) *Gateway {
	t.Helper()
	bin := findBin(t, "prometheus-alertmanager", "prometheus-alertmanager")
	dir := t.TempDir()
	file := filepath.Join(dir, "alertmanager.yml")
	writeFile(t, file, conf)
	return startGateway(t, "alertmanager", func(port int) *exec.Cmd {
		return exec.Command(bin,
			"--config.file="+file,
			"--storage.path="+filepath.Join(dir, "data"),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
			"--cluster.listen-address=",
			"--log.level=warn",
		)
	})
}

// AmtoolPath returns Debian's amtool (shipped with prometheus-alertmanager),
// failing the test when it is missing.
func AmtoolPath(t testing.TB) string {
	t.Helper()
	return findBin(t, "amtool", "prometheus-alertmanager")
}
