package service

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testenv"
)

// loginsUntilLimited checks that the limiter decides on a working Redis:
// five logins of one account are allowed (not degraded) with 4..0 left,
// the sixth is limited.
// slowOK is the store deadline of tests that check a Redis works, not how
// fast: generous, so that a loaded machine (go test -race, other packages)
// does not turn a slow answer into a degraded one.
const slowOK = time.Second

// Each account logs in from an IP of its own, so that login-ip (10/min)
// never binds first.
func loginsUntilLimited(t *testing.T, base, account string) {
	t.Helper()
	ip := "198.51.100." + strconv.Itoa(int(crc32.ChecksumIEEE([]byte(account))%250+1))
	login := `{"endpoint":"POST /auth/login","ip":"` + ip + `","account":"` + account + `"}`
	for i := 4; i >= 0; i-- {
		resp, body := post(t, base+"/v1/check", login)
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(i) || resp.Header.Get("X-RateLimit-Degraded") != "" {
			t.Fatalf("login %d: %d remaining %q degraded %q %s", 5-i, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), resp.Header.Get("X-RateLimit-Degraded"), body)
		}
	}
	if resp, body := post(t, base+"/v1/check", login); resp.StatusCode != 429 {
		t.Fatalf("6th login: %d %s", resp.StatusCode, body)
	}
}

// TestRedisAuthStandalone: a redis-server --requirepass, with the default
// user's password and with an ACL user and password; a wrong password is
// logged at start with Redis's own answer, and decisions follow the
// failure modes.
func TestRedisAuthStandalone(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t, "--requirepass", "s3cret", "--user", "alice", "on", ">al1ce", "~*", "&*", "+@all")
	_, base := start(t, Config{RedisURL: "redis://:s3cret@" + srv.Addr + "/0", StoreTimeout: slowOK})
	loginsUntilLimited(t, base, "a")
	_, base = start(t, Config{RedisURL: "redis://alice:al1ce@" + srv.Addr + "/1", StoreTimeout: slowOK})
	loginsUntilLimited(t, base, "a")

	_, base, logs := startLogged(t, Config{RedisURL: "redis://:wrong@" + srv.Addr + "/0"})
	if got := logs.lines("redis unreachable at start", "WRONGPASS"); len(got) != 1 || strings.Contains(logs.String(), "wrong") {
		t.Fatalf("want one line with WRONGPASS and no password:\n%s", logs)
	}
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.7","account":"a"}`); resp.StatusCode != 503 {
		t.Fatalf("fail-closed login with a wrong password: %d", resp.StatusCode)
	}
}

// TestRedisAuthCluster: a 3-node Cluster whose nodes require a password
// (requirepass, masterauth), through redis+cluster://:pass@h1,h2,h3.
func TestRedisAuthCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartClusterAuth(t, "clu$ter")
	_, base := start(t, Config{RedisURL: "redis+cluster://:clu%24ter@" + strings.Join(cl.Addrs, ","), StoreTimeout: slowOK})
	loginsUntilLimited(t, base, "alice")
	_, _, logs := startLogged(t, Config{RedisURL: "redis+cluster://:nope@" + strings.Join(cl.Addrs, ",")})
	if got := logs.lines("redis unreachable at start", "WRONGPASS"); len(got) != 1 {
		t.Fatalf("want one line with WRONGPASS:\n%s", logs)
	}
}

// tlsTestCA writes a CA and a certificate for 127.0.0.1 signed by it
// (server and client use: the cluster bus is mutual TLS) into dir and
// returns the three PEM files.
func tlsTestCA(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	ca := testenv.NewCA(t, "tollgate test CA")
	caFile = filepath.Join(dir, "ca.pem")
	ca.WriteCert(t, caFile)
	certFile, keyFile = ca.WritePair(t, dir, "server", "127.0.0.1")
	return caFile, certFile, keyFile
}

// TestRedisTLS: rediss:// to a redis-server --tls-port whose certificate a
// CA of the test signed, trusted through RedisCA (--redis-ca); without
// it the certificate is refused, and the start says so.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	ca, cert, key := tlsTestCA(t, t.TempDir())
	tlsPort := testenv.FreePort(t)
	testenv.StartRedis(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", ca, "--tls-auth-clients", "no", "--requirepass", "tl$")
	url := "rediss://:tl%24@127.0.0.1:" + strconv.Itoa(tlsPort) + "/0"
	_, base := start(t, Config{RedisURL: url, RedisCA: ca, StoreTimeout: slowOK})
	loginsUntilLimited(t, base, "alice")

	// the start's ping gets slowOK too: on a loaded machine the handshake
	// may outlast the default 50ms, and the log would then name the
	// deadline instead of the certificate
	_, base, logs := startLogged(t, Config{RedisURL: url, StoreTimeout: slowOK})
	if got := logs.lines("redis unreachable at start", "certificate signed by unknown authority"); len(got) != 1 {
		t.Fatalf("want one line naming the untrusted certificate:\n%s", logs)
	}
	if resp, _ := post(t, base+"/v1/check", `{"endpoint":"GET /feed","ip":"192.0.2.9","user_id":"u"}`); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "1" {
		t.Fatalf("fail-open read on an untrusted server: %d %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Degraded"))
	}
	// A CA file with a plain redis:// URL is a configuration mistake.
	if err := (&Config{RedisURL: "redis://127.0.0.1:1/0", RedisCA: ca}).Validate(); err == nil || !strings.Contains(err.Error(), "does not use TLS") {
		t.Fatalf("CA without TLS: %v", err)
	}
}

// traffic sends fail-open reads and fail-closed logins of fresh subjects
// from 2 goroutines until stopped, and checks each answer follows the
// failure mode: reads 200 (degraded or not), logins 200 or 503
// LIMITER_UNAVAILABLE.
type traffic struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	bad      []string
	outcomes map[string]int
	n        atomic.Int64
}

func startTraffic(t *testing.T, base string, from int64) *traffic {
	tr := &traffic{stop: make(chan struct{}), outcomes: map[string]int{}}
	tr.n.Store(from)
	for w := 0; w < 2; w++ {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for {
				select {
				case <-tr.stop:
					return
				default:
				}
				k := tr.n.Add(1)
				i, ip := strconv.FormatInt(k, 10), "192."+strconv.FormatInt(k/62500%250, 10)+"."+strconv.FormatInt(k/250%250, 10)+"."+strconv.FormatInt(k%250, 10)
				resp, body := postNoFatal(base+"/v1/check", `{"endpoint":"GET /feed","ip":"`+ip+`","user_id":"u`+i+`"}`)
				tr.record("read", resp, body, resp.StatusCode == 200)
				resp, body = postNoFatal(base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"`+ip+`","account":"acct`+i+`"}`)
				tr.record("login", resp, body, resp.StatusCode == 200 || (resp.StatusCode == 503 && strings.Contains(body, `"LIMITER_UNAVAILABLE"`)))
				time.Sleep(2 * time.Millisecond) // pace: the machine is shared
			}
		}()
	}
	return tr
}

// postNoFatal is post for goroutines other than the test's: a transport
// error becomes a response of status 0 (recorded as a bad answer).
func postNoFatal(url, body string) (*http.Response, string) {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return &http.Response{Header: http.Header{}}, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (tr *traffic) record(kind string, resp *http.Response, body string, ok bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.outcomes[kind+" "+strconv.Itoa(resp.StatusCode)+" degraded="+resp.Header.Get("X-RateLimit-Degraded")]++
	if !ok && len(tr.bad) < 10 {
		tr.bad = append(tr.bad, kind+": "+strconv.Itoa(resp.StatusCode)+" "+body)
	}
}

// waitServed waits until n answers have been recorded: traffic is
// flowing (the positive signal a failover is started after).
func (tr *traffic) waitServed(t *testing.T, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() string {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		got := 0
		for _, c := range tr.outcomes {
			got += c
		}
		if got < n {
			return fmt.Sprintf("%d answers before the failover, want %d", got, n)
		}
		return ""
	})
}

// finish stops the traffic, fails the test on answers that did not follow
// the failure mode and returns the outcome counts.
func (tr *traffic) finish(t *testing.T, phase string) map[string]int {
	t.Helper()
	close(tr.stop)
	tr.wg.Wait()
	t.Logf("%s: %v", phase, tr.outcomes)
	if len(tr.bad) > 0 {
		t.Errorf("%s: decisions that did not follow the failure mode: %q", phase, tr.bad)
	}
	return tr.outcomes
}

// waitMaster waits until the Sentinel names addr as the master.
func waitMaster(t *testing.T, sc *redis.SentinelClient, name, addr string) {
	t.Helper()
	eventually(t, 60*time.Second, func() string {
		got, err := sc.GetMasterAddrByName(context.Background(), name).Result()
		if err != nil || len(got) != 2 || net.JoinHostPort(got[0], got[1]) != addr {
			return fmt.Sprintf("sentinel names %v (%v), want %s", got, err, addr)
		}
		return ""
	})
}

// waitDecides waits until a fresh login is decided on Redis (not degraded).
func waitDecides(t *testing.T, base, account string) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		resp, _ := post(t, base+"/v1/check", `{"endpoint":"POST /auth/login","ip":"198.51.100.251","account":"`+account+`"}`)
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Degraded") != "" {
			return "login: " + strconv.Itoa(resp.StatusCode)
		}
		return ""
	})
}

// waitRoles waits until ROLE answers want (master, slave) on each client.
func waitRoles(t *testing.T, want map[*redis.Client]string) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		for c, role := range want {
			r, _ := c.Do(context.Background(), "ROLE").Slice()
			if len(r) == 0 || r[0] != role {
				return fmt.Sprintf("%s is %v, want %s", c.Options().Addr, r, role)
			}
			if role == "slave" && (len(r) < 4 || r[3] != "connected") {
				return fmt.Sprintf("replica %s not connected: %v", c.Options().Addr, r)
			}
		}
		return ""
	})
}

// TestRedisSentinelFailover runs the limiter on a Sentinel-managed master
// with a replica, both requiring a password, through two Sentinels.
//  1. SENTINEL FAILOVER under traffic: every decision meanwhile follows
//     its failure mode, and afterwards decisions succeed on the new master
//     (the old one, demoted, refuses writes).
//  2. The new master is killed under traffic: while no master answers,
//     fail-open reads are answered degraded and fail-closed logins 503;
//     once the Sentinels promote the other node, decisions succeed again.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	const name, pw = "tgmaster", "sent1nel"
	master := testenv.StartRedis(t, "--requirepass", pw, "--masterauth", pw)
	replica := testenv.StartRedis(t, "--requirepass", pw, "--masterauth", pw, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	mc := redis.NewClient(&redis.Options{Addr: master.Addr, Password: pw})
	defer mc.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr, Password: pw})
	defer rc.Close()
	waitRoles(t, map[*redis.Client]string{mc: "master", rc: "slave"})
	s1 := testenv.StartSentinel(t, name, master.Addr, pw, 1)
	s2 := testenv.StartSentinel(t, name, master.Addr, pw, 1)
	_, base := start(t, Config{RedisURL: "redis+sentinel://:" + pw + "@" + s1.Addr + "," + s2.Addr + "/" + name + "/0",
		StoreTimeout: 200 * time.Millisecond, NoL1: true})
	loginsUntilLimited(t, base, "before")
	sc := redis.NewSentinelClient(&redis.Options{Addr: s1.Addr})
	defer sc.Close()

	tr := startTraffic(t, base, 0)
	tr.waitServed(t, 40) // traffic before the failover
	if err := sc.Failover(context.Background(), name).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	waitMaster(t, sc, name, replica.Addr)
	waitDecides(t, base, "probe-1")
	tr.finish(t, "SENTINEL FAILOVER")
	waitRoles(t, map[*redis.Client]string{rc: "master", mc: "slave"})
	loginsUntilLimited(t, base, "after-failover")

	tr = startTraffic(t, base, 1_000_000)
	tr.waitServed(t, 40)
	replica.Stop() // the new master dies; the Sentinels promote the old one
	waitMaster(t, sc, name, master.Addr)
	waitDecides(t, base, "probe-2")
	out := tr.finish(t, "master killed")
	if out["read 200 degraded=1"] == 0 || out["login 503 degraded="] == 0 {
		t.Errorf("master killed: no degraded read or no 503 login while no master answered: %v", out)
	}
	waitRoles(t, map[*redis.Client]string{mc: "master"})
	loginsUntilLimited(t, base, "after-kill")
}

// TestRedisTLSCluster: rediss+cluster://:pass@... to a 3-node Cluster that
// speaks TLS (client port, bus and replication) with a test CA, every node
// requiring a password.
func TestRedisTLSCluster(t *testing.T) {
	t.Parallel()
	ca, cert, key := tlsTestCA(t, t.TempDir())
	cl := testenv.StartClusterTLS(t, "tl$clu", testenv.TLSFiles{CA: ca, Cert: cert, Key: key})
	_, base := start(t, Config{RedisURL: "rediss+cluster://:tl%24clu@" + strings.Join(cl.Addrs, ","), RedisCA: ca, StoreTimeout: slowOK})
	loginsUntilLimited(t, base, "alice")
}
