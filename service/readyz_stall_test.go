package service

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// TestRiskdReadyzWhileRedisStalls (6.7): with Redis paused (it keeps the
// connection and answers nothing) riskd's /readyz still answers 503
// naming Redis within its one-second deadline (internal/health), so a
// readiness probe (Kubernetes' default timeout is 1 s) sees the cause
// instead of a hung request.
func TestRiskdReadyzWhileRedisStalls(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	rs := testenv.StartRedis(t)
	rr := startRiskdAgainst(t, ns, rs, slog.New(slog.DiscardHandler))
	eventually(t, 10*time.Second, func() string {
		if code, body := get(t, "http://"+rr.Addr+"/readyz"); code != 200 {
			return fmt.Sprintf("readyz %d %s", code, body)
		}
		return ""
	})

	rs.Pause(t)
	defer rs.Resume(t)
	for i := 0; i < 3; i++ {
		start := time.Now()
		code, body := get(t, "http://"+rr.Addr+"/readyz")
		took := time.Since(start)
		var v struct {
			Dependencies map[string]string `json:"dependencies"`
			Error        string            `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		if code != 503 || v.Dependencies["redis"] != "down" || !strings.Contains(v.Error, "redis unreachable") {
			t.Fatalf("readyz with redis paused: %d %s", code, body)
		}
		if took > 1500*time.Millisecond {
			t.Fatalf("readyz with redis paused took %v, want its 1 s deadline: %s", took, body)
		}
	}
}

// TestRiskdReadyzWhileNATSStalls (6.7): with NATS paused (the TCP
// connection stays open, nothing answers, as behind a black-holing
// network) riskd cannot receive events, so /readyz answers 503 naming
// NATS and riskd logs the cause at ERROR within seconds, not once the
// client's pings give up minutes later; it is ready again once NATS
// answers.
func TestRiskdReadyzWhileNATSStalls(t *testing.T) {
	t.Parallel()
	ns := testenv.StartNATS(t)
	rs := testenv.StartRedis(t)
	logs := &testenv.SyncBuffer{}
	rr := startRiskdAgainst(t, ns, rs, slog.New(slog.NewJSONHandler(logs, nil)))
	ready := func() string {
		if code, body := get(t, "http://"+rr.Addr+"/readyz"); code != 200 || !strings.Contains(body, `"nats":"up"`) {
			return fmt.Sprintf("readyz %d %s", code, body)
		}
		return ""
	}
	eventually(t, 10*time.Second, ready)

	ns.Pause(t)
	eventually(t, 5*time.Second, func() string {
		start := time.Now()
		code, body := get(t, "http://"+rr.Addr+"/readyz")
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Fatalf("readyz with nats paused took %v: %s", took, body)
		}
		if code != 503 || !strings.Contains(body, `"nats":"down"`) || !strings.Contains(body, "nats unreachable") {
			return fmt.Sprintf("readyz with nats paused: %d %s", code, body)
		}
		if !strings.Contains(logs.String(), `"level":"ERROR","msg":"nats unreachable`) {
			return "no ERROR log naming nats"
		}
		return ""
	})
	ns.Resume(t)
	eventually(t, 15*time.Second, ready)
}
