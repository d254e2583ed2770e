package storage

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOpenInvalidURI(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want string // in the error, besides the URI
	}{
		{"", "empty"},
		{"ftp://host/x", `unsupported scheme "ftp"`},
		{"s3://", "missing bucket name"},
		{"s3:///jobs/x", "missing bucket name"},
		{"gs://", "missing bucket name"},
		{"azblob:///x", "missing bucket name"},
		{"s3://bucket:9000/x", "?endpoint="},
		{"s3://key:secret@bucket/x", "credentials in the URI"},
		{"s3://bucket/a/../b", "not a clean"},
		{"s3://bucket/a//b", "not a clean"},
		{"s3://bucket/x#frag", "fragment"},
		{"file://host/data", "file URIs have no host"},
		{"file://", "missing path"},
		{"s3://bu cket/x", "invalid"},
		{"://x", "invalid"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			_, err := Open(context.Background(), tc.uri)
			if !errors.Is(err, ErrInvalidURI) {
				t.Fatalf("Open(%q): got %v, want ErrInvalidURI", tc.uri, err)
			}
			shown := strings.Replace(tc.uri, "key:secret@", "key:xxxxx@", 1) // redacted
			if !strings.Contains(err.Error(), shown) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q): error %q, want it to name the URI and say %q", tc.uri, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Open(%q): error %q shows the password", tc.uri, err)
			}
		})
	}
}

// TestOpenDriverRejects covers URIs that parse but that the gocloud.dev
// driver refuses: the error still names the URI.
func TestOpenDriverRejects(t *testing.T) {
	for _, uri := range []string{
		"s3://bucket/x?no_such_param=1",
		"s3://bucket/x?use_path_style=maybe",
		"file:///tmp/x?no_such_param=1",
		"mem://x?no_such_param=1",
	} {
		t.Run(uri, func(t *testing.T) {
			_, err := Open(context.Background(), uri)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), strings.SplitN(uri, "?", 2)[0]) {
				t.Errorf("error %q does not name %s", err, uri)
			}
		})
	}
}

func TestURI(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	wd = filepath.ToSlash(wd)
	for _, tc := range []struct {
		uri, sub, want string
	}{
		{"/data/jobs/x", "", "file:///data/jobs/x"},
		{"/data/jobs/x/", "checkpoints", "file:///data/jobs/x/checkpoints"},
		{"rel/dir", "", "file://" + wd + "/rel/dir"},
		{"file://./rel/dir", "a/b", "file://" + wd + "/rel/dir/a/b"},
		{"file:///data/my%20jobs", "", "file:///data/my%20jobs"},
		{"file://localhost/data", "", "file:///data"},
		{"mem://", "", "mem://"},
		{"mem://scratch/jobs/x", "ckpt", "mem://scratch/jobs/x/ckpt"},
		{"s3://bucket", "", "s3://bucket"},
		{"s3://bucket/", "jobs/x", "s3://bucket/jobs/x"},
		{"s3://bucket/jobs/x/?region=eu-west-1", "", "s3://bucket/jobs/x?region=eu-west-1"},
		{"s3://bucket/jobs/x?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1", "export",
			"s3://bucket/jobs/x/export?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1"},
		{"gs://bucket/jobs/x", "a b", "gs://bucket/jobs/x/a%20b"},
		{"azblob://container/jobs/x?localemu=true", "", "azblob://container/jobs/x?localemu=true"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			loc, err := parseURI(tc.uri)
			if err != nil {
				t.Fatal(err)
			}
			s := &Store{loc: loc}
			if got := s.Sub(tc.sub).URI(); got != tc.want {
				t.Errorf("URI = %s, want %s", got, tc.want)
			}
			// The URI parses back to the same place.
			loc2, err := parseURI(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if got := (&Store{loc: loc2}).URI(); got != tc.want {
				t.Errorf("URI of the URI = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestS3Unreachable opens an s3:// Store against a loopback port nothing
// listens on: Open succeeds without contacting it, and the first call fails
// with an error naming the object, which is not ErrNotExist.
func TestS3Unreachable(t *testing.T) {
	// Credentials from the environment keep the AWS SDK from looking for
	// an instance metadata service.
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := mustOpen(t, "s3://bucket/jobs/x?endpoint=http://"+addr+"&use_path_style=true&region=us-east-1")
	_, err = s.Read(ctx, "checkpoints/ckpt-1")
	if err == nil || errors.Is(err, ErrNotExist) {
		t.Fatalf("Read: got %v, want a connection error", err)
	}
	if !strings.Contains(err.Error(), "s3://bucket/jobs/x/checkpoints/ckpt-1") {
		t.Errorf("error %q does not name s3://bucket/jobs/x/checkpoints/ckpt-1", err)
	}
}
