package streams

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNATSURLs: nats+tls:// is read as tls://, every URL of a list is
// checked and redacted, and the CA and credentials files are checked
// before a connection is tried.
func TestNATSURLs(t *testing.T) {
	t.Parallel()
	if got := ServerURLs("nats+tls://a:pw@h1:4222, nats://h2:4222"); got != "tls://a:pw@h1:4222,nats://h2:4222" {
		t.Fatalf("ServerURLs = %q", got)
	}
	if got := RedactURL("nats://limiter:s3cret@h1:4222,tls://riskd:other@h2:4222,nats://h3"); got != "nats://***@h1:4222,tls://***@h2:4222,nats://h3" {
		t.Fatalf("RedactURL = %q", got)
	}
	for _, bad := range []string{"http://h:4222", "nats://", "redis://u:s3cret@h"} {
		err := ValidateURLs("nats://ok:4222," + bad)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("ValidateURLs(%q) = %v", bad, err)
		}
	}
	if err := ValidateURLs("nats+tls://u:p@h:4222,tls://h,nats://h"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, a := range []Auth{{CA: junk}, {Creds: junk}, {CA: filepath.Join(dir, "missing")}, {Creds: filepath.Join(dir, "missing")}} {
		if err := a.Validate(); err == nil {
			t.Fatalf("Validate(%+v) = nil", a)
		}
	}
	if err := (Auth{}).Validate(); err != nil || len((Auth{}).Options()) != 0 {
		t.Fatal("the zero Auth must add nothing")
	}
}
