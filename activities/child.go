package activities

// Training and evaluation run in a child process of the worker binary
// (`trainflow train-child REQUEST.json`, see ChildMain) under a memory
// limit, so that no spec, not even one whose memory estimate is wrong,
// can take the worker down with it (and, in `trainflow dev`, Temporal,
// the prediction server and the console). This file is the parent's side:
// starting the child, the protocol, and what its death means.
//
// The protocol: the child writes JSON lines (childMsg) to file descriptor
// 3 and reads the parent's answers (childReply) from file descriptor 4.
// It answers every "commit" message before the child goes on, so a
// checkpoint is pinned for the evaluator and reported to the workflow
// before retention may delete it, exactly as in-process training does.
// The last message is "done" or "error"; a child that exits without one
// died.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// ErrTypeChildKilled is the (retryable) error type of an attempt whose
// child was killed, before MaxChildKills: the last is a non-retryable
// InvalidSpec error (the job asks for more than the worker allows).
const ErrTypeChildKilled = "ChildKilled"

// ChildCommand is the subcommand of the worker binary that runs a
// training or evaluation child (ChildMain).
const ChildCommand = "train-child"

// MaxChildKills is how many attempts in a row of one activity may have
// their child killed (by a signal, or by running out of its memory limit)
// before the activity fails for good (non-retryable), failing the job.
const MaxChildKills = 2

// dataReserve is the writable memory a child needs besides its heap: the
// runtime's metadata, the binary's data and the threads' stacks (8 MiB
// each with cgo). Measured: the worker binary needs 100 to 200 MB of it
// to start (see docs/resource-limits.md).
const dataReserve = 512 << 20

// ChildLimits are the memory limits a training or evaluation child sets on
// itself before it reads anything: Heap becomes its collector's soft limit
// (GOMEMLIMIT: the collector works harder rather than pass it) and Data
// its RLIMIT_DATA, the hard limit on its private writable memory (a
// mapping past it fails, and the Go runtime exits with "fatal error: out
// of memory"). RLIMIT_DATA rather than RLIMIT_AS: the runtime reserves
// hundreds of MB of address space it never uses, and each cgo thread
// 8 MiB, so an address-space limit is either loose or fails at random
// at start; reservations (PROT_NONE) do not count against RLIMIT_DATA.
// No cgroup is delegated to a worker in general (none here: cgroup v1
// hybrid, no writable memory.max). The child also raises its own
// oom_score_adj to 1000, so that if the machine runs out of memory the
// kernel kills the child before the worker.
type ChildLimits struct {
	Heap int64 `json:"heap"`
	Data int64 `json:"data"`
}

// childLimits are the limits of a's children: a.ChildMemory as their
// data limit if set, else the estimate limit (MaxTrainBytes) plus a
// quarter for the collector's headroom plus dataReserve.
func (a *Activities) childLimits() ChildLimits {
	heap := a.maxTrainBytes()
	heap += heap / 4
	data := heap + dataReserve
	if a.ChildMemory > 0 {
		data = a.ChildMemory
		heap = max(data-dataReserve, data/2)
	}
	return ChildLimits{Heap: heap, Data: data}
}

// childMsg is a line the child sends: Kind "step" (Step reached, Steps
// since the last such message, Loss of the last step), "commit" (Progress
// committed: wait for the reply), "done" (Result or Metrics) or "error".
type childMsg struct {
	Kind         string          `json:"kind"`
	Step         int64           `json:"step,omitempty"`
	Steps        int64           `json:"steps,omitempty"`
	Loss         float64         `json:"loss,omitempty"`
	Progress     *train.Progress `json:"progress,omitempty"`
	Result       *train.Result   `json:"result,omitempty"`
	Metrics      *train.Metrics  `json:"metrics,omitempty"`
	Error        string          `json:"error,omitempty"`
	ErrType      string          `json:"err_type,omitempty"`
	NonRetryable bool            `json:"non_retryable,omitempty"`
}

// childReply answers a commit: an empty Stop goes on, else the child
// stops and exits.
type childReply struct {
	Stop string `json:"stop,omitempty"`
}

// childRequest is the file the child reads: what to run and its limits.
type childRequest struct {
	Limits   ChildLimits       `json:"limits"`
	Train    *trainChildJob    `json:"train,omitempty"`
	Evaluate *evaluateChildJob `json:"evaluate,omitempty"`
	Export   *exportChildJob   `json:"export,omitempty"`
}

// errChildKilled is matched by the error of a child that was killed.
var errChildKilled = errors.New("child process killed")

// childKilledError is a child's death by a signal or by its memory limit.
type childKilledError struct{ reason string }

func (e childKilledError) Error() string      { return e.reason }
func (childKilledError) Is(target error) bool { return target == errChildKilled }

// runTrainChild runs the child for req in scratch (a fresh local
// directory the caller removes), passing its messages to handle until it
// ends, and returns its final message. Cancelling ctx kills the child's
// whole process group. A child killed by a signal or its memory limit is
// an error matching errChildKilled; another death is a plain (retryable)
// error with the last line of its stderr.
func (a *Activities) runTrainChild(ctx context.Context, scratch string, req childRequest, handle func(childMsg) (childReply, error)) (childMsg, error) {
	exe := a.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return childMsg{}, err
		}
	}
	reqPath := filepath.Join(scratch, "request.json")
	b, err := json.Marshal(req)
	if err != nil {
		return childMsg{}, err
	}
	if err := atomicfile.Write(reqPath, b); err != nil {
		return childMsg{}, err
	}
	logf, err := os.Create(filepath.Join(scratch, "child.log"))
	if err != nil {
		return childMsg{}, err
	}
	defer logf.Close()
	fromChild, childOut, err := os.Pipe()
	if err != nil {
		return childMsg{}, err
	}
	defer fromChild.Close()
	childIn, toChild, err := os.Pipe()
	if err != nil {
		childOut.Close()
		return childMsg{}, err
	}
	defer toChild.Close()
	var stderr tail
	var oom oomWatch
	cmd := exec.CommandContext(ctx, exe, append(append([]string{}, a.ExeArgs...), ChildCommand, reqPath)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+scratch)
	cmd.Stdout = logf
	cmd.Stderr = io.MultiWriter(logf, &stderr, &oom)
	cmd.ExtraFiles = []*os.File{childOut, childIn} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Start()
	childOut.Close()
	childIn.Close()
	if err != nil {
		return childMsg{}, fmt.Errorf("start training child: %w", err)
	}
	final, herr := readChild(fromChild, toChild, handle)
	if herr != nil { // the parent gave up on it: stop the child
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	werr := cmd.Wait()
	switch {
	case herr != nil:
		return childMsg{}, herr
	case ctx.Err() != nil:
		return childMsg{}, ctx.Err()
	case final.Kind == "done" || final.Kind == "error":
		return final, nil
	}
	return childMsg{}, childDeath(werr, cmd.ProcessState, oom.seen, stderr.lastLine(), req.Limits)
}

// readChild reads the child's messages, answering commits through handle,
// until its final message or the end of its output.
func readChild(from io.Reader, to io.Writer, handle func(childMsg) (childReply, error)) (childMsg, error) {
	r := bufio.NewReaderSize(from, 64<<10)
	enc := json.NewEncoder(to)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return childMsg{}, nil // died, or closed its end: Wait tells
		}
		var m childMsg
		if err := json.Unmarshal(line, &m); err != nil {
			return childMsg{}, fmt.Errorf("training child: bad message: %w", err)
		}
		if m.Kind == "done" || m.Kind == "error" {
			return m, nil
		}
		reply, err := handle(m)
		if err != nil {
			return childMsg{}, err
		}
		if m.Kind == "commit" {
			if err := enc.Encode(reply); err != nil {
				return childMsg{}, nil
			}
		}
	}
}

// childDeath explains a child that exited without its final message:
// killed by a signal, out of memory (oom: its stderr said so), or another
// crash, whose last line of stderr is last.
func childDeath(werr error, ps *os.ProcessState, oom bool, last string, lim ChildLimits) error {
	limit := fmt.Sprintf("its memory limit is %s (RLIMIT_DATA) with a heap goal of %s (worker --child-memory, else --max-train-memory)",
		FormatBytes(lim.Data), FormatBytes(lim.Heap))
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		why := ""
		if ws.Signal() == syscall.SIGKILL {
			why = " (the kernel's OOM killer, or an operator)"
		}
		return childKilledError{fmt.Sprintf("child process killed by signal %s%s; %s", ws.Signal(), why, limit)}
	}
	if oom {
		return childKilledError{fmt.Sprintf("child process ran out of memory; %s", limit)}
	}
	return fmt.Errorf("training child process: %w: %s", werr, last)
}

// lastLine is the last non-empty line the tail holds.
func (t *tail) lastLine() string {
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return lines[len(lines)-1]
}

// lineWith returns the rest of the last line the tail holds from the
// first occurrence of s on it, "" if none has it. Errors raised inside a
// DoFn come back on lines of the runner's own, as a quoted value of a
// log line (error="…"): then the rest of that value, unquoted.
func (t *tail) lineWith(s string) string {
	lines := strings.Split(string(t.buf), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		k := strings.Index(line, s)
		if k < 0 {
			continue
		}
		if q := strings.LastIndex(line[:k], `="`); q >= 0 {
			if v, err := strconv.QuotedPrefix(line[q+1:]); err == nil && q+1+len(v) > k {
				if u, err := strconv.Unquote(v); err == nil {
					if j := strings.Index(u, s); j >= 0 {
						return u[j:]
					}
				}
			}
		}
		return line[k:]
	}
	return ""
}

// oomMarkers are what the Go runtime writes when a child reaches its
// memory limit: "fatal error: out of memory", "runtime: out of memory:
// cannot allocate", or a thread whose stack cannot be mapped. A crash
// dump that follows can be long, so they are looked for as the child
// writes, not in its tail.
var oomMarkers = []string{"out of memory", "pthread_create failed: Resource temporarily unavailable", "cannot allocate memory"}

// oomWatch notes whether an oomMarker went through it.
type oomWatch struct {
	carry []byte
	seen  bool
}

func (w *oomWatch) Write(p []byte) (int, error) {
	if w.seen {
		return len(p), nil
	}
	buf := append(w.carry, p...)
	for _, m := range oomMarkers {
		if strings.Contains(string(buf), m) {
			w.seen = true
		}
	}
	const keep = 64 // longer than every marker
	w.carry = append(w.carry[:0], buf[max(len(buf)-keep, 0):]...)
	return len(p), nil
}

// childError turns a child's "error" message back into the error the
// in-process activity would have returned.
func childError(m childMsg) error {
	switch {
	case m.ErrType != "" && m.NonRetryable:
		return temporal.NewNonRetryableApplicationError(m.Error, m.ErrType, nil)
	case m.ErrType != "":
		return temporal.NewApplicationError(m.Error, m.ErrType)
	}
	return errors.New(m.Error)
}

// killNote is the heartbeat detail an attempt whose child was killed
// leaves for its retry (and that every heartbeat of a training attempt
// after such a kill carries on): how many attempts in a row had their
// child killed. Its step keeps train.Progress's field name.
type killNote struct {
	train.Progress
	ChildKills int `json:"child_kills"`
}

// previousKills is the count of killed children the previous attempt
// left in its heartbeat details (0 for a first attempt).
func previousKills(ctx context.Context) int {
	var n killNote
	if !activity.HasHeartbeatDetails(ctx) || activity.GetHeartbeatDetails(ctx, &n) != nil {
		return 0
	}
	return max(n.ChildKills, 0)
}

// killed is the error of an attempt whose child was killed (err matches
// errChildKilled): it seals the count in the heartbeat for the next
// attempt, and is non-retryable once MaxChildKills attempts in a row had
// theirs killed.
func killed(ctx context.Context, hb *beater, role string, prev int, last train.Progress, err error) error {
	kills := prev + 1
	hb.seal(ctx, killNote{Progress: last, ChildKills: kills})
	msg := fmt.Sprintf("%s %v (%d of %d attempts in a row)", role, err, kills, MaxChildKills)
	activity.GetLogger(ctx).Error("child process killed", "role", role, "child_kills", kills, "error", err)
	if kills >= MaxChildKills {
		return temporal.NewNonRetryableApplicationError(msg+": not retried again; make the job smaller or raise the limit",
			workflows.ErrTypeInvalidSpec, nil)
	}
	return temporal.NewApplicationError(msg, ErrTypeChildKilled)
}
