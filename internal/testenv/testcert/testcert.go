// Package testcert makes a throwaway certificate authority and the server
// and client certificates it signs, for tests of TLS connections.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is a CA and two leaves, written as PEM files into a test's
// temporary directory.
type Set struct {
	CAPath                string
	ServerCert, ServerKey string // for 127.0.0.1 and localhost
	ClientCert, ClientKey string
	Server                tls.Certificate
	Pool                  *x509.CertPool // holds the CA
}

// New makes a Set; it fails the test on error.
func New(t testing.TB) *Set {
	t.Helper()
	dir := t.TempDir()
	caKey := key(t)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "trainflow test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	s := &Set{CAPath: filepath.Join(dir, "ca.pem"), Pool: x509.NewCertPool()}
	s.Pool.AddCert(ca)
	write(t, s.CAPath, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certPath, keyPath string, c tls.Certificate) {
		k := key(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		write(t, certPath, "CERTIFICATE", der)
		write(t, keyPath, "EC PRIVATE KEY", kder)
		c, err = tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			t.Fatal(err)
		}
		return certPath, keyPath, c
	}
	s.ServerCert, s.ServerKey, s.Server = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	s.ClientCert, s.ClientKey, _ = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return s
}

func key(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func write(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
