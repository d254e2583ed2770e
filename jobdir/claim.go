package jobdir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/trainflow/trainflow/internal/storage"
)

// ClaimFile is the key of a job directory's claim: the record of the job
// that owns it, written once by the job's first step (PrepareJob, or
// BatchPredict for its output directory) before anything else. Every
// other step checks it before it reads, writes or deletes anything there.
const ClaimFile = "job.json"

// ClaimVersion is the Version of claims that record Parent: a claim
// without it was written before, and its Parent says nothing.
const ClaimVersion = 2

// Claim is the content of ClaimFile.
type Claim struct {
	// JobID is the owning job's ID (its workflow ID), FirstRunID the run
	// ID of its first run, which Temporal generates: retries, resets and
	// continue-as-new keep it, a new job under a reused ID gets another.
	JobID      string `json:"job_id"`
	FirstRunID string `json:"first_run_id"`
	// Parent is the workflow ID of the workflow that started the job as
	// its child (a tuning job's trial), as the Temporal server recorded
	// it; "" for a job a client started. Meaningful from ClaimVersion on.
	Parent  string `json:"parent,omitempty"`
	Version int    `json:"version,omitempty"`
}

// ErrNoClaim is wrapped by ReadClaim's error for a directory without a
// claim, ErrBadClaim by its error for a claim that does not decode.
var (
	ErrNoClaim  = errors.New("jobdir: no claim (job.json)")
	ErrBadClaim = errors.New("jobdir: claim (job.json) does not decode")
)

// maxClaimBytes bounds what ReadClaim reads: a claim is a few IDs.
const maxClaimBytes = 4 << 10

// SameJob reports whether c and o name the same job: the same job ID
// and first run.
func (c Claim) SameJob(o Claim) bool { return c.JobID == o.JobID && c.FirstRunID == o.FirstRunID }

// ReadClaim reads the claim of the job directory in st. The error never
// holds the file's content.
func ReadClaim(ctx context.Context, st *storage.Store) (Claim, error) {
	r, err := st.NewReader(ctx, ClaimFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Claim{}, fmt.Errorf("%s: %w", st.URI(), ErrNoClaim)
	}
	if err != nil {
		return Claim{}, err
	}
	defer r.Close()
	var c Claim
	dec := json.NewDecoder(&limited{r: r, n: maxClaimBytes})
	if err := dec.Decode(&c); err != nil || c.JobID == "" {
		return Claim{}, fmt.Errorf("%s: %w", st.URI(), ErrBadClaim)
	}
	return c, nil
}

// ParseClaim decodes a claim read by other means (a reader with its own
// confinement, such as the console's). The error never holds b.
func ParseClaim(b []byte) (Claim, error) {
	var c Claim
	if len(b) > maxClaimBytes || json.Unmarshal(b, &c) != nil || c.JobID == "" {
		return Claim{}, ErrBadClaim
	}
	return c, nil
}

// Claim reads the directory's claim (ReadClaim).
func (d *Dir) Claim(ctx context.Context) (Claim, error) { return ReadClaim(ctx, d.st) }

// WriteClaim writes c as the directory's claim unless it has one, and
// returns the claim the directory has afterwards: c, or the one found.
// The caller compares (Claim.SameJob) to refuse another job's directory.
func (d *Dir) WriteClaim(ctx context.Context, c Claim) (Claim, error) {
	old, err := d.Claim(ctx)
	if err == nil || !errors.Is(err, ErrNoClaim) {
		return old, err
	}
	b, _ := json.Marshal(c)
	if err := d.st.Write(ctx, ClaimFile, b); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// limited reads at most n bytes from r, then fails: a claim larger than
// that is not one.
type limited struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("claim too large")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= n
	return n, err
}
