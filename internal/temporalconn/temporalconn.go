// Package temporalconn holds the one way trainflow's commands connect to
// Temporal: the address, the namespace and, for a secured cluster or
// Temporal Cloud, TLS (client certificate, CA, server name) and an API key.
// Flag and environment names are the Temporal CLI's, so a shell set up
// for `temporal` works for `trainflow worker` and `trainflow jobs` too.
// These settings come from the operator; nothing here reads a job spec.
package temporalconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/trainflow/trainflow/internal/keyfile"
)

// DefaultAddress is the frontend a command dials when nothing says otherwise.
const DefaultAddress = "127.0.0.1:7233"

// Flags are the connection settings of one command.
type Flags struct {
	Address, Namespace string
	// TLS turns TLS on with the system's roots; implied by any of the
	// paths below and by an API key.
	TLS                       bool
	CertPath, KeyPath, CAPath string
	ServerName                string
	DisableHostVerification   bool
	APIKey                    string
	// APIKeyFile holds the API key (a private file: keyfile.Token), so
	// that it is in neither ps nor the environment; APIKey wins.
	APIKeyFile string
	tlsOff     bool // --tls=false or TEMPORAL_TLS=false
}

// env names: the first is the Temporal CLI's current name, the rest older
// names it also accepted.
var env = struct {
	address, namespace, apiKey, tls, cert, key, ca, serverName, noVerify []string
}{
	address:    []string{"TEMPORAL_ADDRESS"},
	namespace:  []string{"TEMPORAL_NAMESPACE"},
	apiKey:     []string{"TEMPORAL_API_KEY"},
	tls:        []string{"TEMPORAL_TLS"},
	cert:       []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CERT"},
	key:        []string{"TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_KEY"},
	ca:         []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CA"},
	serverName: []string{"TEMPORAL_TLS_SERVER_NAME"},
	noVerify:   []string{"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"},
}

func lookup(names []string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// boolValue is a flag.Value for a bool whose default comes from the
// environment and whose "set to false" must be told apart from "unset".
type boolValue struct{ v, off *bool }

func (b boolValue) String() string {
	if b.v == nil {
		return "false"
	}
	return strconv.FormatBool(*b.v)
}

func (b boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.v, *b.off = v, !v
	return nil
}

func (b boolValue) IsBoolFlag() bool { return true }

// Register adds the connection flags to fs. addrFlag names the address
// flag (trainflow has always called it --temporal); its default and the
// others' come from the TEMPORAL_* environment.
func (f *Flags) Register(fs *flag.FlagSet, addrFlag string) {
	fs.StringVar(&f.Address, addrFlag, or(lookup(env.address), DefaultAddress), "Temporal frontend host:port ($TEMPORAL_ADDRESS)")
	fs.StringVar(&f.Namespace, "namespace", or(lookup(env.namespace), "default"), "Temporal namespace ($TEMPORAL_NAMESPACE)")
	fs.StringVar(&f.APIKey, "api-key", lookup(env.apiKey), "API key sent to Temporal as a bearer token; turns TLS on ($TEMPORAL_API_KEY)")
	fs.StringVar(&f.APIKeyFile, "api-key-file", os.Getenv("TRAINFLOW_API_KEY_FILE"), "file holding the API key, mode 0600, e.g. a container secret; turns TLS on like --api-key ($TRAINFLOW_API_KEY_FILE)")
	fs.StringVar(&f.CertPath, "tls-cert-path", lookup(env.cert), "client certificate (PEM) for mutual TLS ($TEMPORAL_TLS_CLIENT_CERT_PATH)")
	fs.StringVar(&f.KeyPath, "tls-key-path", lookup(env.key), "client private key (PEM) for mutual TLS ($TEMPORAL_TLS_CLIENT_KEY_PATH)")
	fs.StringVar(&f.CAPath, "tls-ca-path", lookup(env.ca), "CA certificate (PEM) the server's certificate must chain to; default the system's roots ($TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	fs.StringVar(&f.ServerName, "tls-server-name", lookup(env.serverName), "server name expected in the server's certificate; default the address's host ($TEMPORAL_TLS_SERVER_NAME)")
	if v, err := strconv.ParseBool(lookup(env.tls)); err == nil {
		f.TLS, f.tlsOff = v, !v
	}
	fs.Var(boolValue{&f.TLS, &f.tlsOff}, "tls", "connect with TLS even with no certificate or API key ($TEMPORAL_TLS; false turns it off)")
	if v, err := strconv.ParseBool(lookup(env.noVerify)); err == nil {
		f.DisableHostVerification = v
	}
	fs.BoolVar(&f.DisableHostVerification, "tls-disable-host-verification", f.DisableHostVerification, "do not check the server's certificate (testing only) ($TEMPORAL_TLS_DISABLE_HOST_VERIFICATION)")
}

// useTLS reports whether the connection is made with TLS: asked for, or
// implied by a certificate, a CA or an API key, unless turned off.
func (f *Flags) useTLS() bool {
	if f.tlsOff {
		return false
	}
	return f.TLS || f.CertPath != "" || f.KeyPath != "" || f.CAPath != "" || f.ServerName != "" ||
		f.DisableHostVerification || f.APIKey != "" || f.APIKeyFile != ""
}

// UsePlainToken makes f present tok as its API key over a plain
// connection: the token of a dev stack's home (keyfile.UserToken), for a
// command that was given no credentials of its own.
func (f *Flags) UsePlainToken(tok string) {
	f.APIKey, f.TLS, f.tlsOff = tok, false, true
}

// Loopback reports whether f's address is on this machine (localhost or
// a loopback IP).
func (f *Flags) Loopback() bool {
	host, _, err := net.SplitHostPort(f.Address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Secured reports whether the connection uses TLS or an API key.
func (f *Flags) Secured() bool { return f.useTLS() || f.APIKey != "" || f.APIKeyFile != "" }

// TLSConfig builds the client's TLS configuration, or nil without TLS.
// Errors name the flag and the file, never the file's contents.
func (f *Flags) TLSConfig() (*tls.Config, error) {
	if !f.useTLS() {
		if f.CertPath != "" || f.KeyPath != "" || f.CAPath != "" {
			return nil, errors.New("--tls=false with TLS certificate flags set: drop one or the other")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName, InsecureSkipVerify: f.DisableHostVerification}
	if (f.CertPath == "") != (f.KeyPath == "") {
		return nil, errors.New("--tls-cert-path and --tls-key-path go together: give both or neither")
	}
	if f.CertPath != "" {
		cert, err := tls.LoadX509KeyPair(f.CertPath, f.KeyPath)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-path %s / --tls-key-path %s: %w", f.CertPath, f.KeyPath, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if f.CAPath != "" {
		pem, err := os.ReadFile(f.CAPath)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-path: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-path %s: no PEM certificate in the file", f.CAPath)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// Options builds the client options; logger may be nil.
func (f *Flags) Options(logger sdklog.Logger) (client.Options, error) {
	if f.Address == "" {
		return client.Options{}, errors.New("no Temporal address: set --temporal or $TEMPORAL_ADDRESS")
	}
	cfg, err := f.TLSConfig()
	if err != nil {
		return client.Options{}, err
	}
	o := client.Options{HostPort: f.Address, Namespace: f.Namespace, Logger: logger}
	o.ConnectionOptions.TLS = cfg
	key := f.APIKey
	if key == "" && f.APIKeyFile != "" {
		if key, err = keyfile.Token(f.APIKeyFile, false); err != nil {
			return client.Options{}, fmt.Errorf("--api-key-file: %w", err)
		}
	}
	if key != "" {
		o.Credentials = client.NewAPIKeyStaticCredentials(key)
		// The SDK turns TLS on with an API key unless told not to.
		o.ConnectionOptions.TLSDisabled = cfg == nil
	}
	return o, nil
}

// Dial connects to Temporal with these settings.
func (f *Flags) Dial(logger sdklog.Logger) (client.Client, error) {
	o, err := f.Options(logger)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(o)
	if err != nil {
		return nil, fmt.Errorf("connect to temporal at %s: %w", f.Address, err)
	}
	return c, nil
}
