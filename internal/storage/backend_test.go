package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/trainflow/trainflow/internal/testenv/miniotest"
	"github.com/trainflow/trainflow/internal/testenv/realtest"
)

// backend opens fresh, empty Stores of one kind for the shared suite.
type backend struct {
	name string
	open func(t *testing.T) *Store
}

// backends lists the backends every suite test runs against: file:// and
// mem:// always, MinIO (s3://) when one is available; see TestMain.
func backends() []backend {
	return []backend{
		{"file", func(t *testing.T) *Store {
			// A directory that does not exist yet: Open creates it.
			return mustOpen(t, filepath.Join(t.TempDir(), "store"))
		}},
		{"mem", func(t *testing.T) *Store {
			return mustOpen(t, fmt.Sprintf("mem://test-%d/jobs/x", memSeq.Add(1)))
		}},
		{"minio", func(t *testing.T) *Store {
			if minio.err != nil {
				t.Fatalf("MinIO: %v", minio.err)
			}
			if minio.uri == "" {
				realtest.Missing(t, minio.skip)
			}
			u, err := url.Parse(minio.uri)
			if err != nil {
				t.Fatal(err)
			}
			u.Path = "/" + randomName() // one prefix per test: runs do not collide
			s := mustOpen(t, u.String())
			t.Cleanup(func() {
				if err := s.DeleteAll(context.Background(), ""); err != nil {
					t.Errorf("clean up %s: %v", s.URI(), err)
				}
			})
			return s
		}},
	}
}

var memSeq atomic.Int64

// forEachBackend runs f as a subtest per backend, each with a fresh Store.
func forEachBackend(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { f(t, b.open(t)) })
	}
}

func mustOpen(t *testing.T, uri string) *Store {
	t.Helper()
	s, err := Open(context.Background(), uri)
	if err != nil {
		t.Fatalf("Open(%q): %v", uri, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func randomName() string {
	var b [6]byte
	rand.Read(b[:])
	return "t-" + hex.EncodeToString(b[:])
}

// minio is the S3-compatible server the suite runs against, if any: uri is
// an s3:// URI of a bucket, skip says why there is none, err why setting one
// up failed.
var minio struct {
	uri, skip string
	err       error
}

// TestMain sets up MinIO for the s3:// backend, from the environment or by
// starting a `minio` binary found on PATH (see internal/testenv/miniotest).
func TestMain(m *testing.M) {
	stop := setUpMinIO()
	code := m.Run()
	stop()
	os.Exit(code)
}

func setUpMinIO() (stop func()) {
	srv, skip, err := miniotest.Start()
	if srv == nil {
		minio.skip, minio.err = "MinIO suite skipped: "+skip, err
		return func() {}
	}
	// The AWS SDK reads credentials from the environment; this also keeps
	// it from asking an instance metadata service.
	for k, v := range srv.Env() {
		os.Setenv(k, v)
	}
	minio.uri = srv.URI
	return srv.Stop
}
