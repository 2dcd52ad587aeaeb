package alerting

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/streams"
)

// TestFailedPostHidesTheURLsSecret: a Slack webhook's url is its secret
// (its path), and an Alertmanager's may carry a password; a failed
// attempt's error, which riskd logs at WARN and ERROR, names the host and
// the cause but neither.
func TestFailedPostHidesTheURLsSecret(t *testing.T) {
	t.Parallel()
	addr := testenv.RefusedAddr(t)
	for _, s := range []sink{
		&webhookSink{label: "webhooks[0]", url: "http://" + addr + "/services/T000/B000/SECRETPATH?token=SECRETQUERY", slack: true},
		&alertmanagerSink{url: "http://am:SECRETPASS@" + addr + "/api/v2/alerts"},
	} {
		err := s.send(context.Background(), &http.Client{Timeout: time.Second}, Delivery{ID: "d", Alert: streams.Alert{Kind: "lockout"}, Folded: 1}, time.Now())
		if err == nil {
			t.Fatalf("%s: a refused connection succeeded", s.name())
		}
		msg := err.Error()
		for _, secret := range []string{"SECRETPATH", "SECRETQUERY", "SECRETPASS"} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s: the error shows the url's secret: %s", s.name(), msg)
			}
		}
		if !strings.Contains(msg, addr) || !strings.Contains(msg, "refused") {
			t.Errorf("%s: the error does not name the host and the cause: %s", s.name(), msg)
		}
	}
}
