// Package miniotest gives tests an S3-compatible server: a running MinIO
// named by the environment, or one started from a `minio` binary on PATH.
//
//	MINIO_ENDPOINT    http://host:port of a running server
//	MINIO_ACCESS_KEY  access key (or MINIO_ROOT_USER, AWS_ACCESS_KEY_ID)
//	MINIO_SECRET_KEY  secret key (or MINIO_ROOT_PASSWORD, AWS_SECRET_ACCESS_KEY)
//	MINIO_BUCKET      bucket to use, created if missing (default trainflow-test)
//
// A started server listens on 127.0.0.1 only and keeps its data in a
// temporary directory removed by Stop.
package miniotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
)

// Server is an S3-compatible server for tests.
type Server struct {
	// URI is the s3:// URI of the test bucket, with the query parameters
	// that reach the server (endpoint, use_path_style, region).
	URI string
	// AccessKey and SecretKey are its credentials.
	AccessKey, SecretKey string
	stop                 func()
}

// Start returns a server with its bucket created: the one MINIO_ENDPOINT
// names, else a `minio` binary from PATH started on a free loopback port.
// With neither it returns nil and, in skip, why.
func Start() (s *Server, skip string, err error) {
	endpoint := os.Getenv("MINIO_ENDPOINT")
	access := firstEnv("MINIO_ACCESS_KEY", "MINIO_ROOT_USER", "AWS_ACCESS_KEY_ID")
	secret := firstEnv("MINIO_SECRET_KEY", "MINIO_ROOT_PASSWORD", "AWS_SECRET_ACCESS_KEY")
	stop := func() {}
	if endpoint == "" {
		bin, err := exec.LookPath("minio")
		if err != nil {
			return nil, "no `minio` binary on PATH and MINIO_ENDPOINT is not set " +
				"(set MINIO_ENDPOINT, MINIO_ACCESS_KEY and MINIO_SECRET_KEY to run against a server)", nil
		}
		access, secret = "trainflow", "trainflow-test-secret"
		if endpoint, stop, err = startMinIO(bin, access, secret); err != nil {
			return nil, "", err
		}
	}
	if access == "" || secret == "" {
		return nil, "", errors.New("MINIO_ENDPOINT is set but MINIO_ACCESS_KEY/MINIO_SECRET_KEY are not")
	}
	bucket := os.Getenv("MINIO_BUCKET")
	if bucket == "" {
		bucket = "trainflow-test"
	}
	if err := createBucket(endpoint, access, secret, bucket); err != nil {
		stop()
		return nil, "", fmt.Errorf("create bucket %s at %s: %w", bucket, endpoint, err)
	}
	q := url.Values{"endpoint": {endpoint}, "use_path_style": {"true"}, "region": {"us-east-1"}}
	return &Server{URI: "s3://" + bucket + "?" + q.Encode(), AccessKey: access, SecretKey: secret, stop: stop}, "", nil
}

// Env returns the environment variables through which the AWS SDK, and so
// internal/storage, finds the server's credentials (and no instance
// metadata service).
func (s *Server) Env() map[string]string {
	return map[string]string{"AWS_ACCESS_KEY_ID": s.AccessKey, "AWS_SECRET_ACCESS_KEY": s.SecretKey, "AWS_EC2_METADATA_DISABLED": "true"}
}

// Stop stops a server Start started; it leaves one from the environment
// running.
func (s *Server) Stop() { s.stop() }

// Use starts a server for test t (Start), skipping t with the reason when
// there is none, stopping it when t ends, and setting its credentials in
// t's environment, which processes t starts inherit. With
// TRAINFLOW_REQUIRE_REAL=1 (set by .ci/run) a missing MinIO fails t.
func Use(t testing.TB) *Server {
	t.Helper()
	s, skip, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		realtest.Missing(t, "MinIO variant: "+skip)
	}
	t.Cleanup(s.Stop)
	for k, v := range s.Env() {
		t.Setenv(k, v)
	}
	return s
}

// Prefix returns the URI of a fresh prefix of the test bucket, named
// name-<nanoseconds>, so runs against a long-lived server do not meet.
func (s *Server) Prefix(name string) (string, error) {
	u, err := url.Parse(s.URI)
	if err != nil {
		return "", err
	}
	u.Path = fmt.Sprintf("/%s-%d", name, time.Now().UnixNano())
	return u.String(), nil
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

// createBucket creates bucket unless it exists.
func createBucket(endpoint, access, secret, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: access, SecretAccessKey: secret}, nil
		}),
	})
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err == nil {
		return nil
	}
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	return err
}
