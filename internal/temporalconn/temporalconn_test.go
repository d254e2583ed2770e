package temporalconn

import (
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/testenv/testcert"
)

func parse(t *testing.T, args ...string) *Flags {
	t.Helper()
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.Register(fs, "temporal")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &f
}

// TestAPIKeyReachesTheServerOverTLS dials a TLS-only gRPC server and checks
// what arrives: the API key as a bearer token, over a verified connection.
func TestAPIKeyReachesTheServerOverTLS(t *testing.T) {
	certs := testcert.New(t)
	ln, got := authRecorder(t, grpc.Creds(credentials.NewServerTLSFromCert(&certs.Server)))

	t.Setenv("TEMPORAL_API_KEY", "key-from-env")
	// The system's roots do not know the test CA: no request may get through.
	if c, err := parse(t, "--temporal", ln.Addr().String()).Dial(nil); err == nil {
		c.Close()
		t.Fatal("dial succeeded against a server whose certificate is not trusted")
	}
	if len(got) != 0 {
		t.Fatal("a request reached the server over an unverified connection")
	}
	f := parse(t, "--temporal", ln.Addr().String(), "--tls-ca-path", certs.CAPath)
	if c, err := f.Dial(nil); err == nil {
		c.Close()
	}
	select {
	case auth := <-got:
		if auth != "Bearer key-from-env" {
			t.Fatalf("authorization metadata %q, want the API key as a bearer token", auth)
		}
	default:
		t.Fatal("no request reached the TLS server: the client did not connect with TLS")
	}
}

func TestEnvironmentAndFlags(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
	t.Setenv("TEMPORAL_NAMESPACE", "prod")
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", "/env/cert.pem")
	t.Setenv("TEMPORAL_TLS_KEY", "/env/key.pem") // the CLI's older name
	f := parse(t, "--namespace", "staging")
	if f.Address != "temporal.example:7233" || f.Namespace != "staging" || f.CertPath != "/env/cert.pem" || f.KeyPath != "/env/key.pem" {
		t.Fatalf("flags %+v: want address and paths from the environment, namespace from the flag", f)
	}
	if !f.useTLS() {
		t.Fatal("a client certificate must turn TLS on")
	}
	t.Setenv("TEMPORAL_TLS", "false")
	if f := parse(t, "--api-key", "k"); f.useTLS() {
		t.Fatal("TEMPORAL_TLS=false must turn TLS off even with an API key")
	}
	if f := parse(t, "--api-key", "k", "--tls"); !f.useTLS() {
		t.Fatal("--tls must win over TEMPORAL_TLS=false")
	}
}

func TestDefaultsArePlainLocal(t *testing.T) {
	for _, k := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_TLS",
		"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CERT", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_KEY",
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CA", "TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"} {
		t.Setenv(k, "")
	}
	o, err := parse(t).Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.HostPort != DefaultAddress || o.Namespace != "default" || o.ConnectionOptions.TLS != nil || o.Credentials != nil {
		t.Fatalf("options %+v: want the local plain default", o)
	}
}

func TestBadTLSSettingsNameTheFlagNotTheContents(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("secret-line-of-some-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-path", "/x/cert.pem"}, "--tls-cert-path and --tls-key-path go together"},
		{[]string{"--tls-ca-path", notPEM}, "--tls-ca-path " + notPEM + ": no PEM certificate"},
		{[]string{"--tls-ca-path", filepath.Join(dir, "missing.pem")}, "--tls-ca-path"},
		{[]string{"--tls-cert-path", notPEM, "--tls-key-path", notPEM}, "--tls-cert-path " + notPEM},
		{[]string{"--tls=false", "--tls-ca-path", notPEM}, "--tls=false with TLS certificate flags"},
	} {
		_, err := parse(t, c.args...).Options(nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to contain %q", c.args, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-line") {
			t.Errorf("%v: error quotes the file: %v", c.args, err)
		}
	}
}

// TestAPIKeyFile checks --api-key-file: the key in a private file reaches
// the server as a bearer token (here over a plain connection, with
// --tls=false, as a compose network's worker sends it); a file others
// may read is refused, naming the flag and not the key.
func TestAPIKeyFile(t *testing.T) {
	ln, got := authRecorder(t)
	t.Setenv("TEMPORAL_API_KEY", "")
	key := strings.Repeat("k", 40)
	path := filepath.Join(t.TempDir(), "keys", "worker.token")
	if err := keyfile.Create(path, []byte(key+"\n")); err != nil {
		t.Fatal(err)
	}
	f := parse(t, "--temporal", ln.Addr().String(), "--api-key-file", path, "--tls=false")
	if !f.Secured() {
		t.Error("an API key file must count as credentials (Secured)")
	}
	if c, err := f.Dial(nil); err == nil {
		c.Close()
	}
	select {
	case auth := <-got:
		if auth != "Bearer "+key {
			t.Fatalf("authorization metadata %q, want the file's key as a bearer token", auth)
		}
	default:
		t.Fatal("no request reached the server")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := parse(t, "--temporal", ln.Addr().String(), "--api-key-file", path, "--tls=false").Options(nil)
	if err == nil || !strings.Contains(err.Error(), "--api-key-file") || !strings.Contains(err.Error(), "others may read it") || strings.Contains(err.Error(), key) {
		t.Errorf("a key file others may read: %v, want refused naming --api-key-file, not the key", err)
	}
}

// authRecorder serves gRPC on a loopback port with opts, answering every
// call PermissionDenied after sending its authorization metadata on got.
func authRecorder(t *testing.T, opts ...grpc.ServerOption) (net.Listener, chan string) {
	t.Helper()
	got := make(chan string, 16)
	srv := grpc.NewServer(append(opts, grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		got <- strings.Join(md.Get("authorization"), ",")
		return status.Error(codes.PermissionDenied, "test server")
	}))...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln, got
}
