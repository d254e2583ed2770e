package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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
				t.Skip(minio.skip)
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
// starting a `minio` binary found on PATH:
//
//	MINIO_ENDPOINT    http://host:port of a running server
//	MINIO_ACCESS_KEY  access key (or MINIO_ROOT_USER, AWS_ACCESS_KEY_ID)
//	MINIO_SECRET_KEY  secret key (or MINIO_ROOT_PASSWORD, AWS_SECRET_ACCESS_KEY)
//	MINIO_BUCKET      bucket to use, created if missing (default trainflow-test)
//
// A started server listens on 127.0.0.1 only, keeps its data in a temporary
// directory and is stopped when the tests end.
func TestMain(m *testing.M) {
	stop := setUpMinIO()
	code := m.Run()
	stop()
	os.Exit(code)
}

func setUpMinIO() (stop func()) {
	stop = func() {}
	endpoint := os.Getenv("MINIO_ENDPOINT")
	access := firstEnv("MINIO_ACCESS_KEY", "MINIO_ROOT_USER", "AWS_ACCESS_KEY_ID")
	secret := firstEnv("MINIO_SECRET_KEY", "MINIO_ROOT_PASSWORD", "AWS_SECRET_ACCESS_KEY")
	if endpoint == "" {
		bin, err := exec.LookPath("minio")
		if err != nil {
			minio.skip = "MinIO suite skipped: no `minio` binary on PATH and MINIO_ENDPOINT is not set " +
				"(set MINIO_ENDPOINT, MINIO_ACCESS_KEY and MINIO_SECRET_KEY to run it against a server)"
			return stop
		}
		access, secret = "trainflow", "trainflow-test-secret"
		endpoint, stop, err = startMinIO(bin, access, secret)
		if err != nil {
			minio.err = err
			return stop
		}
	}
	if access == "" || secret == "" {
		minio.err = errors.New("MINIO_ENDPOINT is set but MINIO_ACCESS_KEY/MINIO_SECRET_KEY are not")
		return stop
	}
	// The AWS SDK reads credentials from the environment; this also keeps
	// it from asking an instance metadata service.
	os.Setenv("AWS_ACCESS_KEY_ID", access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	bucket := os.Getenv("MINIO_BUCKET")
	if bucket == "" {
		bucket = "trainflow-test"
	}
	q := url.Values{"endpoint": {endpoint}, "use_path_style": {"true"}, "region": {"us-east-1"}}
	uri := "s3://" + bucket + "?" + q.Encode()
	if err := createBucket(uri, bucket); err != nil {
		minio.err = fmt.Errorf("create bucket %s at %s: %w", bucket, endpoint, err)
		return stop
	}
	minio.uri = uri
	return stop
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// startMinIO runs the minio binary on a free loopback port and waits until
// it answers its health check.
func startMinIO(bin, access, secret string) (endpoint string, stop func(), err error) {
	stop = func() {}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", stop, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "trainflow-minio-*")
	if err != nil {
		return "", stop, err
	}
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", "127.0.0.1:0", dir)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+access, "MINIO_ROOT_PASSWORD="+secret,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CALLHOME_ENABLE=off")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", stop, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	endpoint = "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return endpoint, stop, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	return "", func() {}, fmt.Errorf("%s did not become healthy at %s within 60 s", bin, endpoint)
}

// createBucket creates bucket through the S3 client of a Store opened at
// uri, unless it exists.
func createBucket(uri, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, uri)
	if err != nil {
		return err
	}
	defer s.Close()
	var client *s3.Client
	if !s.b.As(&client) {
		return errors.New("not an S3 bucket")
	}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err == nil {
		return nil
	}
	_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	return err
}
