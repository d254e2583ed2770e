package serving_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainflow/trainflow/serving"
)

// Attacks on the prediction server, sent through its real HTTP server on a
// loopback port.

// running is a Server serving on a loopback port until the test ends.
type running struct {
	url string // http://127.0.0.1:PORT or https://…
	env *env
}

// startServer serves newEnv(opts, 0) on a free loopback port.
func startServer(t *testing.T, opts serving.Options) *running {
	t.Helper()
	e := newEnv(t, opts, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	scheme := "http"
	if opts.TLSCertFile != "" {
		scheme = "https"
	}
	return &running{url: scheme + "://" + ln.Addr().String(), env: e}
}

func (r *running) addr() string { return r.url[strings.Index(r.url, "//")+2:] }

// hostileV2 is the V2 body of the attack: one tensor of shape [650000]
// holding 650,000 values, 1.3 MB.
func hostileV2() []byte {
	data := strings.Repeat("0,", 650_000)
	return []byte(`{"inputs":[{"name":"age","shape":[650000],"datatype":"FP64","data":[` + data[:len(data)-1] + `]}]}`)
}

// hostileEmpty is a :predict body of 433,000 empty instances, 1.3 MB.
func hostileEmpty() []byte {
	insts := strings.Repeat("{},", 433_000)
	return []byte(`{"instances":[` + insts[:len(insts)-1] + `]}`)
}

// hostileNested is a V2 body of 650,000 values nested in one row of a
// scalar input, 1.3 MB: nested data is counted value by value.
func hostileNested() []byte {
	data := strings.Repeat("0,", 650_000)
	return []byte(`{"inputs":[{"name":"age","shape":[1],"datatype":"FP64","data":[[` + data[:len(data)-1] + `]]}]}`)
}

// hostileExamples is a :classify body of 433,000 empty examples, 1.3 MB.
func hostileExamples() []byte {
	ex := strings.Repeat("{},", 433_000)
	return []byte(`{"examples":[` + ex[:len(ex)-1] + `]}`)
}

// hostile are the attack bodies, their route and the answer they get.
var hostile = []struct {
	name, path string
	body       func() []byte
	code       int
	msg        string
}{
	{"v2 shape 650000", "/v2/models/census/infer", hostileV2, http.StatusRequestEntityTooLarge, "shape [650000] holds more than 1000 values"},
	{"v1 many empty instances", predictURL, hostileEmpty, http.StatusRequestEntityTooLarge, "433000 instances, at most 1000 per request"},
	{"v2 650000 values nested in one row", "/v2/models/census/infer", hostileNested, http.StatusRequestEntityTooLarge, "data holds more than 1000 values"},
	{"classify many empty examples", "/v1/models/census:classify", hostileExamples, http.StatusRequestEntityTooLarge, "433000 examples, at most 1000 per request"},
}

// send posts body to url and returns the status and error message.
func send(t testing.TB, c *http.Client, url string, body []byte, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct{ Error string }
	b, _ := io.ReadAll(res.Body)
	json.Unmarshal(b, &e)
	return res.StatusCode, e.Error
}

// TestHostileBodies sends the attack bodies over HTTP: each is refused
// with its 4xx and a message naming the numbers, and the server allocates
// at most 4 times the body's size for it (before the fix: ~360 MB for the
// 1.3 MB V2 body).
func TestHostileBodies(t *testing.T) {
	r := startServer(t, serving.Options{})
	c := &http.Client{}
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body()
			send(t, c, r.url+tc.path, body) // warm: the connection, the pools
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			code, msg := send(t, c, r.url+tc.path, body)
			runtime.ReadMemStats(&after)
			if code != tc.code || !strings.Contains(msg, tc.msg) {
				t.Fatalf("got %d %q, want %d mentioning %q", code, msg, tc.code, tc.msg)
			}
			alloc := after.TotalAlloc - before.TotalAlloc // the client's share included
			t.Logf("%s: body %d bytes, %d bytes allocated (%.2fx the body)", tc.name, len(body), alloc, float64(alloc)/float64(len(body)))
			if alloc > 4*uint64(len(body)) {
				t.Errorf("%d bytes allocated for a body of %d, want at most 4x", alloc, len(body))
			}
		})
	}
	t.Run("not JSON", func(t *testing.T) {
		code, msg := send(t, c, r.url+predictURL, []byte("instances=1"))
		if code != http.StatusBadRequest || !strings.Contains(msg, "not valid JSON") {
			t.Fatalf("got %d %q, want 400 naming invalid JSON", code, msg)
		}
	})
	t.Run("body over the limit", func(t *testing.T) {
		code, msg := send(t, c, r.url+predictURL, []byte(`{"instances":[`+strings.Repeat(" ", 1_600_000)+`]}`))
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "larger than 1500000 bytes") {
			t.Fatalf("got %d %q, want 413 naming the limit", code, msg)
		}
	})
}

// TestHostileMemory has 4 clients send the attack bodies at once for a
// while and samples the process's heap and RSS: the issue saw RSS go from
// 247 MB to 2.2 GB with 4 clients. The heap in use must stay within
// 100 MB of where it started.
func TestHostileMemory(t *testing.T) {
	r := startServer(t, serving.Options{})
	bodies := [][]byte{hostileV2(), hostileEmpty()}
	paths := []string{hostile[0].path, hostile[1].path}
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	baseRSS := rss(t)

	stop := make(chan struct{})
	var peakHeap, peakRSS uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peakHeap = max(peakHeap, ms.HeapInuse)
			peakRSS = max(peakRSS, rss(t))
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	const clients, requests = 4, 20
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			c := &http.Client{}
			for j := range requests {
				k := (i + j) % 2
				code, _ := send(t, c, r.url+paths[k], bodies[k])
				if code != http.StatusRequestEntityTooLarge {
					errs <- fmt.Errorf("client %d request %d: status %d, want 413", i, j, code)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	const mb = 1 << 20
	t.Logf("%d clients x %d requests of 1.3 MB: heap in use %d MB -> peak %d MB; RSS %d MB -> peak %d MB",
		clients, requests, base.HeapInuse/mb, peakHeap/mb, baseRSS/mb, peakRSS/mb)
	if peakHeap > base.HeapInuse+100*mb {
		t.Errorf("heap in use peaked at %d MB, from %d MB: want under 100 MB more", peakHeap/mb, base.HeapInuse/mb)
	}
}

// rss returns the resident set size of this process, 0 where /proc is
// not.
func rss(t testing.TB) uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, resident uint64
	fmt.Sscan(string(b), &size, &resident)
	return resident * uint64(os.Getpagesize())
}

// rawRequest writes head (and no more) on a new connection to addr.
func rawRequest(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readUntilClosed reads conn until the server closes it, failing t if it
// has not within d.
func readUntilClosed(t *testing.T, conn net.Conn, d time.Duration) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("connection still open after %v (read %q): %v", d, b, err)
	}
	return string(b)
}

// TestSlowClientsClosed checks that a body or headers sent too slowly
// end their connection at the read timeout (before the fix, 200 slow
// bodies stayed open for more than 70 s).
func TestSlowClientsClosed(t *testing.T) {
	r := startServer(t, serving.Options{ReadTimeout: 300 * time.Millisecond, ReadHeaderTimeout: 300 * time.Millisecond})
	t.Run("slow body", func(t *testing.T) {
		conn := rawRequest(t, r.addr(), "POST "+predictURL+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"instances\":[")
		got := readUntilClosed(t, conn, 10*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 408 ") || !strings.Contains(got, "not received in time") {
			t.Fatalf("got %q, want a 408 naming the timeout", got)
		}
	})
	t.Run("slow headers", func(t *testing.T) {
		conn := rawRequest(t, r.addr(), "POST "+predictURL+" HTTP/1.1\r\nHost: x\r\n")
		readUntilClosed(t, conn, 10*time.Second)
	})
}

const testToken = "Ab3-test-token-not-a-secret"

// TestAuth checks that with a token every route but the liveness probe
// needs it, /metrics included, and that a 401 says how to authenticate.
func TestAuth(t *testing.T) {
	r := startServer(t, serving.Options{AuthToken: testToken})
	checkAuth(t, r, &http.Client{})
}

func checkAuth(t *testing.T, r *running, c *http.Client) {
	t.Helper()
	good := mustJSON(t, map[string]any{"instances": []any{goodInstance(t, nil)}})
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/v1/models", "", 401},
		{"GET", "/v1/models", "Bearer wrong-token-of-some-length", 401},
		{"GET", "/v1/models", "Basic " + testToken, 401},
		{"GET", "/v1/models", "Bearer " + testToken[:len(testToken)-1], 401},
		{"GET", "/v1/models", "Bearer " + testToken, 200},
		{"GET", "/v1/models", "bearer " + testToken, 200},
		{"GET", "/metrics", "", 401},
		{"GET", "/metrics", "Bearer " + testToken, 200},
		{"POST", predictURL, "", 401},
		{"POST", predictURL, "Bearer " + testToken, 200},
		{"POST", "/v2/models/census/infer", "", 401},
		{"GET", "/v2/health/ready", "", 401},
		{"GET", "/v2/models/census", "", 401},
		{"GET", "/nosuch", "", 401},
		{"GET", "/v2/health/live", "", 200},
	} {
		var body io.Reader
		if tc.method == "POST" {
			body = strings.NewReader(good)
		}
		req, err := http.NewRequest(tc.method, r.url+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s %s with %q: got %d %s, want %d", tc.method, tc.path, tc.auth, res.StatusCode, clip(b), tc.want)
			continue
		}
		if tc.want == 401 {
			var e struct{ Error string }
			if json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "Bearer") || res.Header.Get("WWW-Authenticate") != `Bearer realm="trainflow"` {
				t.Errorf("%s %s: 401 %s with WWW-Authenticate %q, want a JSON error naming Bearer and a Bearer challenge", tc.method, tc.path, b, res.Header.Get("WWW-Authenticate"))
			}
		}
	}
}

// TestTLS serves HTTPS with a generated self-signed certificate: a client
// trusting it gets answers (with the token), a plain HTTP request does
// not, and a bad certificate file fails Serve at once.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	r := startServer(t, serving.Options{AuthToken: testToken, TLSCertFile: certFile, TLSKeyFile: keyFile})
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	checkAuth(t, r, c)

	res, err := http.Get("http://" + r.addr() + "/v2/health/live")
	if err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to the HTTPS port: got 200, want a refusal")
		}
	}
	if _, err := (&http.Client{}).Get(r.url + "/v2/health/live"); err == nil {
		t.Errorf("HTTPS with an untrusted certificate: got an answer, want a certificate error")
	}

	e := newEnv(t, serving.Options{TLSCertFile: certFile, TLSKeyFile: certFile}, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := e.srv.Serve(context.Background(), ln); err == nil || !strings.Contains(err.Error(), "TLS certificate") {
		t.Errorf("Serve with a certificate as key: got %v, want an error naming the TLS certificate", err)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// to PEM files, returning them and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "trainflow test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// BenchmarkHostileBodies sends the attack bodies through the server's
// Echo instance (no network) and reports, besides B/op, the bytes
// allocated per byte of body ("alloc/body"; the goal is at most 4).
func BenchmarkHostileBodies(b *testing.B) {
	e := newEnv(b, serving.Options{}, 0)
	for _, tc := range hostile {
		b.Run(tc.name, func(b *testing.B) {
			body := tc.body()
			rd := bytes.NewReader(body)
			req, err := http.NewRequest(http.MethodPost, tc.path, nil)
			if err != nil {
				b.Fatal(err)
			}
			w := &sink{h: http.Header{}}
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			n := 0
			for b.Loop() {
				rd.Reset(body)
				req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
				req.Header = http.Header{"Content-Type": {"application/json"}}
				clear(w.h)
				w.code = 0
				e.srv.ServeHTTP(w, req)
				if w.code != tc.code {
					b.Fatalf("status %d, want %d", w.code, tc.code)
				}
				n++
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n)/float64(len(body)), "alloc/body")
		})
	}
}
