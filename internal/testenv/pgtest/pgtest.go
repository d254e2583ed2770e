// Package pgtest gives tests a PostgreSQL server: a running one named by
// PGTEST_URL (postgres://user:password@host:port/), or a throwaway cluster
// made with the initdb and postgres binaries of a local installation
// (PATH, else Debian's /usr/lib/postgresql/<version>/bin).
//
// A started cluster listens on 127.0.0.1 only, on a free port, with no Unix
// socket, and keeps its data in a temporary directory removed by Stop. As
// root (CI containers), the binaries run as the "postgres" user that
// Debian's package creates, since PostgreSQL refuses to run as root.
//
// With TRAINFLOW_REQUIRE_REAL=1 (set by .ci/run) a missing PostgreSQL
// fails the test instead of skipping it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
)

// Server is a PostgreSQL server for tests.
type Server struct {
	// URL is postgres://user:password@127.0.0.1:port/ with no database:
	// callers append one (Database).
	URL  string
	stop func()
}

// Database returns the URL of database name on s.
func (s *Server) Database(name string) string {
	return strings.TrimSuffix(s.URL, "/") + "/" + name + "?sslmode=disable"
}

// Stop stops a server Start started; it leaves one from the environment
// running.
func (s *Server) Stop() { s.stop() }

// Use starts a server for test t (Start) and stops it when t ends. It skips
// t, with the reason, when there is no PostgreSQL, unless
// TRAINFLOW_REQUIRE_REAL=1.
func Use(t testing.TB) *Server {
	t.Helper()
	s, skip, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		realtest.Missing(t, "PostgreSQL variant: "+skip)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start returns the server PGTEST_URL names, else a new cluster; with
// neither possible it returns nil and, in skip, why.
func Start() (s *Server, skip string, err error) {
	if u := os.Getenv("PGTEST_URL"); u != "" {
		return &Server{URL: u, stop: func() {}}, "", nil
	}
	bin, ok := binDir()
	if !ok {
		return nil, "no initdb/postgres binaries on PATH or in /usr/lib/postgresql/*/bin and PGTEST_URL is not set " +
			"(apt-get install postgresql, as .ci/run does)", nil
	}
	return startCluster(bin)
}

// binDir finds the directory holding initdb and postgres.
func binDir() (string, bool) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil { // links in /usr/local/bin: the installation's own directory has pg_isready too
			p = real
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "initdb")); err == nil {
			return filepath.Dir(p), true
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.Reverse(dirs) // newest version first (Glob sorts)
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, true
		}
	}
	return "", false
}

// startCluster runs initdb in a temporary directory and starts postgres on
// a free loopback port, waiting until it accepts connections.
func startCluster(bin string) (_ *Server, _ string, err error) {
	dir, err := os.MkdirTemp("", "trainflow-pg-*")
	if err != nil {
		return nil, "", err
	}
	cleanup := func() { os.RemoveAll(dir) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	cred, err := runAs(dir)
	if err != nil {
		return nil, "", err
	}
	const password = "trainflow-test"
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, "", err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "trainflow",
		"--pwfile", pwfile, "--auth", "scram-sha-256", "--no-sync", "-E", "UTF8", "--locale", "C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("initdb: %w\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// fsync off and no synchronous commit: test data need not survive a
	// power loss, and the Temporal schema setup is ~100 statements.
	pg := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-k", "", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	pg.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, "", err
	}
	pg.Stdout, pg.Stderr = logf, logf
	if err := pg.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { pg.Wait(); logf.Close(); close(exited) }()
	stop := func() {
		// SIGINT is PostgreSQL's fast shutdown.
		pg.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			pg.Process.Kill()
			<-exited
		}
		cleanup()
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		// Listening is not ready: until recovery ends PostgreSQL refuses
		// connections ("the database system is starting up"), and the
		// Temporal SQL plugin gives up on the first refusal.
		if exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port)).Run() == nil {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			cleanup()
			return nil, "", fmt.Errorf("postgres exited at start:\n%s", log)
		case <-ctx.Done():
			stop()
			return nil, "", errors.New("postgres did not accept connections within 60 s")
		case <-time.After(50 * time.Millisecond):
		}
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword("trainflow", password), Host: addr, Path: "/"}
	return &Server{URL: u.String(), stop: stop}, "", nil
}

// runAs returns the credential to run PostgreSQL with: nil for a non-root
// user, else the "postgres" user, who is given dir.
func runAs(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: %w (Debian's postgresql package creates the user)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
