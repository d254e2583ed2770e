package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultLogBytes bounds a replica's log file when Command.LogBytes is 0.
const DefaultLogBytes = 64 << 20

// TailBytes is how much of the end of its log a Process keeps in memory
// for error messages (Exit.Tail).
const TailBytes = 4 << 10

// Command is what a replica runs: argv, working directory and the whole
// environment. A sandbox rewrites it (Wrapper) before Start.
type Command struct {
	Argv []string
	Dir  string
	Env  []string
	// Log is the file stdout and stderr go to, created (or appended to:
	// a restarted replica's log continues) with mode 0600.
	Log string
	// Header, if not "", is one line written to Log before the program
	// starts (within LogBytes): a restarted replica's separator, so its log
	// does not run from one generation into the next unmarked.
	Header string
	// LogBytes caps what is written to Log (0: DefaultLogBytes); past it
	// output is dropped, with one line saying so.
	LogBytes int64
	// Writable are the host directories the program writes (the
	// Replica's model, checkpoint, TensorBoard and workspace
	// directories): what a sandbox must bind read-write. Start ignores it.
	Writable []string
	// ReadOnly are host paths the program reads (a registered
	// application's directory, a package's virtual environment): what a
	// sandbox must bind read-only. Start ignores it.
	ReadOnly []string
	// Terminate, if set, is how Stop asks the program to end instead of
	// SIGTERM to its process group (a sandbox's own way to reach the
	// program inside it); SIGKILL after the grace period still goes to
	// the whole group.
	Terminate func(pid int) error
	// Ended, if set, is called once with how the program ended (or
	// failed to start) and returns it as the Process reports it: a
	// sandbox names the job budget that killed it (ErrBudget) and lets go
	// of the job's cgroup.
	Ended func(Exit) Exit
}

// Wrapper rewrites a Command to run it elsewhere, e.g. in a sandbox: the
// argv of the sandbox program with the original command after it. It must
// keep Log and LogBytes, and may set Terminate.
type Wrapper interface {
	Wrap(Command) (Command, error)
}

// Process is a running replica program in its own process group.
type Process struct {
	cmd  *exec.Cmd
	log  *cappedLog
	done chan struct{}
	exit Exit

	stopOnce  sync.Once
	stopped   bool // Stop sent the signals (set before done closes)
	mu        sync.Mutex
	terminate func(pid int) error // Command.Terminate
}

// Exit is how a program ended.
type Exit struct {
	// Code is the exit status (-1 when killed by a signal).
	Code int
	// Signal names the signal that killed it ("" if it exited).
	Signal string
	// Stopped is true when Stop ended it.
	Stopped bool
	// Tail is the end of its log (at most TailBytes).
	Tail string
	// Err is an error waiting for it other than its exit status.
	Err error
}

// ExitTempFail is the exit code by which a program asks to be restarted
// (EX_TEMPFAIL of sysexits.h).
const ExitTempFail = 75

// Success reports a zero exit.
func (e Exit) Success() bool { return e.Err == nil && e.Signal == "" && e.Code == 0 }

// Retryable reports whether the replica should be restarted (the rule of
// the package documentation): killed by a signal (or 128+SIGKILL/SIGTERM
// as a shell reports it), or ExitTempFail. Any other nonzero code is the
// user's error, and so is a job over its budget (ErrBudget).
func (e Exit) Retryable() bool {
	if errors.Is(e.Err, ErrBudget) {
		return false // over the job's budget: so would a restart be
	}
	if e.Err != nil || e.Signal != "" {
		return true
	}
	switch e.Code {
	case ExitTempFail, 128 + int(syscall.SIGKILL), 128 + int(syscall.SIGTERM):
		return true
	}
	return false
}

// String says how the program ended, e.g. "exit status 2" or "killed by
// signal killed".
func (e Exit) String() string {
	switch {
	case e.Err != nil:
		return e.Err.Error()
	case e.Signal != "":
		return "killed by signal " + e.Signal
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Start starts c in its own process group. The program gets no stdin.
// It is killed (SIGKILL) if the goroutine's OS thread, which is the worker
// process's, dies (Pdeathsig): a killed worker leaves no replica behind;
// processes the program starts in its group are stopped by Stop.
func Start(c Command) (*Process, error) {
	if len(c.Argv) == 0 {
		return nil, errors.New("app: empty command")
	}
	if c.LogBytes <= 0 {
		c.LogBytes = DefaultLogBytes
	}
	if err := os.MkdirAll(filepath.Dir(c.Log), 0o755); err != nil {
		return nil, notStarted(c, fmt.Errorf("app: log: %w", err))
	}
	f, err := os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, notStarted(c, fmt.Errorf("app: log: %w", err))
	}
	st, _ := f.Stat()
	l := &cappedLog{f: f, left: c.LogBytes - st.Size()}
	if c.Header != "" {
		_, _ = l.Write([]byte(strings.TrimSuffix(c.Header, "\n") + "\n"))
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Dir, cmd.Env = c.Dir, c.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // never the worker's environment
	}
	cmd.Stdout, cmd.Stderr = l, l
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{cmd: cmd, log: l, done: make(chan struct{}), terminate: c.Terminate}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked dies: keep this
		// goroutine on its thread until the program ends.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		p.exit = exitOf(cmd, err)
		f.Close()
		p.exit.Tail = l.tail()
		p.mu.Lock()
		p.exit.Stopped = p.stopped
		p.mu.Unlock()
		if c.Ended != nil {
			p.exit = c.Ended(p.exit)
		}
		close(p.done)
	}()
	if err := <-started; err != nil {
		f.Close()
		return nil, notStarted(c, fmt.Errorf("app: start %s: %w", c.Argv[0], err))
	}
	return p, nil
}

// notStarted is Start's error err for c, which did not start: c.Ended is
// told so.
func notStarted(c Command, err error) error {
	if c.Ended != nil {
		c.Ended(Exit{Code: -1, Err: err})
	}
	return err
}

func exitOf(cmd *exec.Cmd, err error) Exit {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	var ee *exec.ExitError
	switch {
	case err != nil && !errors.As(err, &ee):
		return Exit{Code: -1, Err: err}
	case ok && ws.Signaled():
		return Exit{Code: -1, Signal: ws.Signal().String()}
	}
	return Exit{Code: cmd.ProcessState.ExitCode()}
}

// PID is the program's process ID, also its process group's.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the program has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the program to end.
func (p *Process) Wait() Exit {
	<-p.done
	return p.exit
}

// Stop ends the program's process group: SIGTERM, then SIGKILL after
// grace if the program has not ended, then waits for it. Processes of
// the group that outlive the program itself are killed too.
func (p *Process) Stop(grace time.Duration) Exit {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		select {
		case <-p.done:
			p.mu.Unlock()
			return
		default:
		}
		p.stopped = true
		p.mu.Unlock()
		pgid := p.PID()
		if p.terminate == nil || p.terminate(pgid) != nil {
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
		}
		select {
		case <-p.done:
		case <-time.After(grace):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	ex := p.Wait()
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL) // stragglers of the group
	waitGroupGone(p.PID(), groupGoneLimit)
	return ex
}

// groupGoneLimit bounds how long Stop waits for the killed group to die.
const groupGoneLimit = 2 * time.Second

// waitGroupGone waits, for at most limit, until group pgid has no live
// member: a process dies some time after its SIGKILL (on a loaded
// machine, after Stop's Wait of the leader returned), and Stop promises
// that none is left when it returns.
func waitGroupGone(pgid int, limit time.Duration) {
	for deadline := time.Now().Add(limit); len(GroupMembers(pgid)) > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // polling /proc: the kernel tells no one when a group is gone
	}
}

// cappedLog writes at most left bytes to f and keeps the last TailBytes
// in memory. Safe for concurrent use (stdout and stderr).
type cappedLog struct {
	mu    sync.Mutex
	f     *os.File
	left  int64
	noted bool
	ring  []byte
}

func (l *cappedLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring = append(l.ring, b...)
	if len(l.ring) > 2*TailBytes {
		l.ring = append(l.ring[:0], l.ring[len(l.ring)-TailBytes:]...)
	}
	switch {
	case l.left >= int64(len(b)):
		l.left -= int64(len(b))
		_, _ = l.f.Write(b)
	case !l.noted:
		if l.left > 0 {
			_, _ = l.f.Write(b[:l.left])
			l.left = 0
		}
		l.noted = true
		_, _ = io.WriteString(l.f, "\n[trainflow: log size cap reached; further output dropped]\n")
	}
	return len(b), nil
}

func (l *cappedLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.ring
	if len(t) > TailBytes {
		t = t[len(t)-TailBytes:]
	}
	return string(t)
}
