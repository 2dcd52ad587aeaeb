package service

import (
	"context"
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
	ctx, cancel := context.WithCancel(context.Background())
	rr, err := StartRiskd(ctx, RiskdConfig{Listen: "127.0.0.1:0", RedisURL: "redis://" + rs.Addr + "/0", NATSURL: ns.URL,
		DecisionsMaxBytes: 16 << 20, EventsMaxBytes: 16 << 20, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-rr.Done })
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
