package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/temporalconn"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/train/app"
)

// The home directory every command uses by default is found here, and
// only here (defaultHome): $TRAINFLOW_HOME, else the home of the
// `trainflow dev` running on this machine for this user (the stack
// record below), else ./.trainflow. So `trainflow dev --home H` in one
// terminal and `trainflow models bless census --version 8` in another
// read the same model repository, H/models, and a command that reads a
// home says which one and why (homeSource).

// stackRecordFile is where `trainflow dev` records the stack it runs,
// for the commands of the same user on the same machine: in the user's
// configuration directory, trainflow/dev.json ("" without one).
func stackRecordFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "trainflow", "dev.json")
}

// stackRecord is a running `trainflow dev`: its home (absolute) and its
// process, alive as long as the record holds.
type stackRecord struct {
	Home string `json:"home"`
	PID  int    `json:"pid"`
}

// recordStack records this process's stack, of home, and returns the
// function that removes the record (if it is still this process's) when
// the stack stops. A record that cannot be written only leaves the other
// commands on $TRAINFLOW_HOME or ./.trainflow.
func recordStack(home string) (remove func()) {
	path := stackRecordFile()
	abs, err := filepath.Abs(home)
	if path == "" || err != nil {
		return func() {}
	}
	b, _ := json.Marshal(stackRecord{Home: abs, PID: os.Getpid()})
	if os.MkdirAll(filepath.Dir(path), 0o755) != nil || atomicfile.Write(path, append(b, '\n')) != nil {
		return func() {}
	}
	return func() {
		if r, ok := readStackRecord(path); ok && r.PID == os.Getpid() {
			os.Remove(path)
		}
	}
}

// runningStack is the record of the `trainflow dev` running for this
// user, if its process is alive.
func runningStack() (stackRecord, bool) {
	path := stackRecordFile()
	if path == "" {
		return stackRecord{}, false
	}
	r, ok := readStackRecord(path)
	if !ok || r.Home == "" || r.PID <= 0 || !app.Alive(r.PID) {
		return stackRecord{}, false
	}
	return r, true
}

func readStackRecord(path string) (stackRecord, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stackRecord{}, false
	}
	var r stackRecord
	if json.Unmarshal(b, &r) != nil {
		return stackRecord{}, false
	}
	return r, true
}

// defaultHome is the home directory of every command's --home (and of
// what defaults to HOME/…): $TRAINFLOW_HOME, else the running `trainflow
// dev`'s home, else ./.trainflow.
func defaultHome() string {
	h, _ := homeAndSource()
	return h
}

// homeSource says where defaultHome comes from, for messages that name
// a path a command looked at.
func homeSource() string {
	_, s := homeAndSource()
	return s
}

func homeAndSource() (home, source string) {
	if h := os.Getenv("TRAINFLOW_HOME"); h != "" {
		return h, "$TRAINFLOW_HOME"
	}
	if r, ok := runningStack(); ok {
		return r.Home, fmt.Sprintf("the home of the trainflow dev running as process %d", r.PID)
	}
	return ".trainflow", "the default home: no $TRAINFLOW_HOME and no trainflow dev running"
}

// modelsLocation is the model repository a command reads: models (its
// --models) if given, else HOME/models of home (its --home), and where
// that comes from, for messages.
func modelsLocation(models, home string, homeSet bool) (loc, source string) {
	switch {
	case models != "":
		return models, "--models"
	case homeSet:
		return filepath.Join(home, "models"), "--home"
	}
	if m := os.Getenv("TRAINFLOW_MODELS"); m != "" {
		return m, "$TRAINFLOW_MODELS"
	}
	h, s := homeAndSource()
	return filepath.Join(h, "models"), s
}

// errNoRepository is the error of a command whose model repository, a
// local directory, does not exist: it names the path it looked at and
// why there, never reports the model's or version's absence as a fact.
func errNoRepository(loc, source string) error {
	return notFoundError{fmt.Errorf("no model repository at %s (from %s): give --home HOME (the --home of trainflow dev) or --models, or set TRAINFLOW_HOME", loc, source)}
}

// localRepositoryMissing reports whether loc names a local directory
// that does not exist (a storage URI is never checked here).
func localRepositoryMissing(loc string) bool {
	if filepath.IsAbs(loc) || !hasScheme(loc) {
		_, err := os.Stat(loc)
		return err != nil
	}
	return false
}

// hasScheme reports whether loc is a URI (s3://…, file://…).
func hasScheme(loc string) bool {
	for i, c := range loc {
		switch {
		case c == ':':
			return i > 0 && len(loc) > i+2 && loc[i+1:i+3] == "//"
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '+', c == '-', c == '.':
		default:
			return false
		}
	}
	return false
}

// homeCredentials gives tc, when it has no credentials of its own (no
// API key, no TLS) and dials a frontend on this machine, the user token
// of the default home (keyfile.UserToken): the one the `trainflow dev`
// of that home made and its Temporal server takes, so commands work
// against the running stack with nothing to type. The token is never
// sent to another machine, nor over TLS to a server that asked for
// other credentials. A home without one (a foreign Temporal) leaves tc
// as it was; a token file that is not private is an error.
func homeCredentials(tc *temporalconn.Flags) error {
	if tc.Secured() || !tc.Loopback() {
		return nil
	}
	tok, err := keyfile.Token(keyfile.UserToken(defaultHome()), false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("user token: %w", err)
	}
	tc.UsePlainToken(tok)
	return nil
}
