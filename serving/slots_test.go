package serving_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/internal/testenv/peakrss"
	"github.com/trainflow/trainflow/serving"
)

// Connection slots under attack (issue 25 item 7), through the real HTTP
// server on a loopback port, attackers and legitimate clients on the same
// address.

// attack holds idle keep-alive connections (each after one GET of the
// liveness probe, open even with a token) and slow bodies (headers sent,
// then a body that never arrives) open on addr until the test ends.
func attack(t *testing.T, addr string, idle, slow int) {
	t.Helper()
	var wg sync.WaitGroup
	var answered atomic.Int64
	for range idle {
		c := dialHeld(t, addr)
		if _, err := io.WriteString(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The answer, if the server gives one in time: the connection
			// is then idle, kept alive.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				answered.Add(1)
			}
			c.SetReadDeadline(time.Time{})
		}()
	}
	wg.Wait()
	// Content-Length under net/http's 256 KB post-handler drain, so that
	// a server refusing the request (401) still reads the body until its
	// read timeout rather than closing at once.
	for range slow {
		c := dialHeld(t, addr)
		if _, err := io.WriteString(c, "POST "+predictURL+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"instances\":["); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("attack: %d idle connections (%d answered), %d slow bodies", idle, answered.Load(), slow)
}

// dialHeld dials addr; the connection is closed when the test ends.
func dialHeld(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// legitimate sends n predictions at once, each on a new connection of a
// client that waits up to 5 s, and returns how many were answered 200.
func legitimate(t *testing.T, r *running, n int, header ...string) int {
	t.Helper()
	body := []byte(mustJSON(t, map[string]any{"instances": []any{goodInstance(t, nil)}}))
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			req, _ := http.NewRequest(http.MethodPost, r.url+predictURL, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			res, err := c.Do(req)
			if err != nil {
				t.Logf("legitimate request: %v", err)
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"predictions"`)) {
				ok.Add(1)
				return
			}
			t.Logf("legitimate request: %d %s", res.StatusCode, b)
		})
	}
	wg.Wait()
	return int(ok.Load())
}

// TestSlotsUnderAttack: with 300 idle keep-alive connections and 600 slow
// bodies held open, 20 of 20 legitimate predictions succeed, on the
// default configuration and with a token. Before the fix the 256 slots
// stayed taken until the idle (60 s) or read (30 s) timeouts: 0 of 20.
func TestSlotsUnderAttack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   serving.Options
		header []string
	}{
		{"default", serving.Options{}, nil},
		{"token", serving.Options{AuthToken: testToken}, []string{"Authorization", "Bearer " + testToken}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startServer(t, tc.opts)
			mark := peakrss.Start(t)
			attack(t, r.addr(), 300, 600)
			got := legitimate(t, r, 20, tc.header...)
			_, grew := mark.Growth(t)
			t.Logf("%d of 20 legitimate requests succeeded; the test process's peak RSS grew %d MiB (server, attackers and clients together)", got, grew>>20)
			if got != 20 {
				t.Fatalf("%d of 20 legitimate requests succeeded under 300 idle + 600 slow connections, want 20", got)
			}
			if grew > 256<<20 {
				t.Errorf("the peak RSS grew by %d MiB under the attack, want at most 256", grew>>20)
			}
		})
	}
}

// blocking is a route, /test/block, whose requests wait until release is
// closed; entered receives once per request that reached it.
type blocking struct {
	entered chan struct{}
	release chan struct{}
	done    func() // closes release, once; deferred by tests, which run before the server's cleanup
}

func newBlocking() *blocking {
	b := &blocking{entered: make(chan struct{}, 16), release: make(chan struct{})}
	var once sync.Once
	b.done = func() { once.Do(func() { close(b.release) }) }
	return b
}

func (b *blocking) routes(e *echo.Echo) {
	e.GET("/test/block", func(c echo.Context) error {
		b.entered <- struct{}{}
		<-b.release
		return c.String(http.StatusOK, "released")
	})
}

// busy opens a connection from local (nil: any) whose request waits on
// the blocking route.
func (b *blocking) busy(t *testing.T, addr string, local net.Addr) net.Conn {
	t.Helper()
	c := dialFrom(t, addr, local)
	if _, err := io.WriteString(c, "GET /test/block HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-b.entered
	return c
}

// dialFrom dials addr from the local address local (nil: any); the
// connection is closed when the test ends.
func dialFrom(t *testing.T, addr string, local net.Addr) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: local}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends GET path on c and reads the answer's status code.
func get(t *testing.T, c net.Conn, path string) int {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// closedByServer reports whether the server has closed c: a read ends at
// once with EOF or a reset rather than waiting.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// metric returns the value of the sample line starting with name in the
// server's /metrics.
func metric(t *testing.T, r *running, name string) string {
	t.Helper()
	res, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return ""
}

// TestMaxConnsBusyWait checks that when every slot is answering a request
// a new connection waits unanswered, and is served once one closes.
func TestMaxConnsBusyWait(t *testing.T) {
	b := newBlocking()
	defer b.done()
	r := startServer(t, serving.Options{MaxConns: 2, Routes: b.routes})
	b.busy(t, r.addr(), nil)
	b.busy(t, r.addr(), nil)
	probe := dialHeld(t, r.addr())
	io.WriteString(probe, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	probe.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if got, err := bufio.NewReader(probe).ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection answered %q (%v) with 2 busy and MaxConns 2, want no answer", got, err)
	}
	b.done()
	probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(probe), nil)
	if err != nil {
		t.Fatalf("third connection once the busy ones answered: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("third connection: status %d, want 200", res.StatusCode)
	}
}

// TestMaxConnsPerClient checks that one address cannot hold more than
// MaxConnsPerClient connections answering requests: its next connection
// is closed at once, while another address is served; /metrics counts it.
func TestMaxConnsPerClient(t *testing.T) {
	b := newBlocking()
	defer b.done()
	r := startServer(t, serving.Options{MaxConns: 8, MaxConnsPerClient: 2, Routes: b.routes})
	greedy := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	b.busy(t, r.addr(), greedy)
	b.busy(t, r.addr(), greedy)
	over := dialFrom(t, r.addr(), greedy)
	io.WriteString(over, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedByServer(over) {
		t.Fatal("third connection of 127.0.0.2 with MaxConnsPerClient 2 not closed")
	}
	if code := get(t, dialHeld(t, r.addr()), "/v2/health/live"); code != http.StatusOK {
		t.Fatalf("another address: %d, want 200", code)
	}
	if got := metric(t, r, `trainflow_serving_connections_shed_total{reason="client_limit"}`); got != "1" {
		t.Fatalf("client_limit sheds: %s, want 1", got)
	}
}
