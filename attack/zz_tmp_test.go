package attack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/tollgate-dev/tollgate/service"
)

func TestZZLease(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\nlimits:\n  - {name: exports, by: [ip], concurrency: 1, lease_ttl: 1h}\n"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := service.Start(ctx, service.Config{ConfigPath: pol, Listen: "127.0.0.1:0", MemoryMaxKeys: 4096, NoForwardAuth: true,
		NATSStoreDir: t.TempDir(), AdminToken: adminToken, APIToken: apiToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + r.Addr
	last := 0.0
	for i := range 3000 {
		ip := fmt.Sprintf("10.%d.%d.1", i/250, i%250)
		c, body := do(t, "POST", base+"/v1/check", `{"endpoint":"GET /export","ip":"`+ip+`"}`, bearer(apiToken))
		_, m := do(t, "GET", base+"/metrics", "", bearer(apiToken))
		n, _ := metric(m, "tollgate_memory_leases_refused_total")
		held, _ := metric(m, "tollgate_memory_leases")
		if c == 429 && n != last+1 {
			t.Logf("i %d %s: uncounted; leases held %v; %s", i, ip, held, body)
			_, sv := do(t, "GET", base+"/v1/admin/subjects/ip/"+ip, "", bearer(adminToken))
			t.Logf("subject: %s", sv)
			break
		}
		last = n
	}
}
