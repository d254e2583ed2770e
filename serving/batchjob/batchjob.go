// Package batchjob is the Beam-free side of batch prediction: the request
// the BatchPredict activity writes for its child process, the plan of
// shards, the output layout and the counts read back. The pipeline itself
// (Beam, and the prediction server's model code) is in package
// serving/batchjob/batchbeam, so that the activity links neither.
//
// Output layout in Request.OutDir, for shards i of n (5 digits each):
//
//	prediction.results-iiiii-of-nnnnn       JSON lines {"input","line"|"index","prediction"}
//	prediction.errors_stats-iiiii-of-nnnnn  JSON lines {"input","line"|"index","reason","column","error"}
//
// and in Request.WorkDir plan.json (the shard count, written first) and
// shard-iiiii.json per committed shard (its counts). A shard is one block
// of input; its files are written to temporary names and renamed, errors
// and counts first, results last: a shard whose results file exists is
// complete, and a rerun (a retried activity) skips it. Shard contents
// depend only on the inputs and the bundle, so a shard written twice is
// written identically.
package batchjob

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/trainflow/trainflow/internal/idx"
	"github.com/trainflow/trainflow/preprocess"
)

// Formats of Request.Format.
const (
	FormatCSV   = "CSV"
	FormatJSONL = "JSONL"
	FormatIDX   = "IDX"
)

// Defaults of Request's sizes.
const (
	DefaultBlockBytes  = 4 << 20
	DefaultBlockImages = 2000
	DefaultBatchSize   = 256
)

// Input is one input file: Path on this machine, Name as results show it
// (the location the job named).
type Input struct {
	Path string `json:"path"`
	Name string `json:"name"`
}

// Request is one batch prediction run, written as JSON by the BatchPredict
// activity and read by the child process.
type Request struct {
	// Bundle is the local export bundle directory.
	Bundle string  `json:"bundle"`
	Inputs []Input `json:"inputs"`
	Format string  `json:"format"`
	// OutDir receives the result and error shards; WorkDir the plan and
	// the shards' counts.
	OutDir  string `json:"out_dir"`
	WorkDir string `json:"work_dir"`
	// BlockBytes (CSV, JSONL) and BlockImages (IDX) size a shard's input;
	// BatchSize is the rows of one model call. 0: the defaults.
	BlockBytes  int64 `json:"block_bytes,omitempty"`
	BlockImages int   `json:"block_images,omitempty"`
	BatchSize   int   `json:"batch_size,omitempty"`
}

// ErrRequest is wrapped by errors no retry can fix: unreadable inputs of
// the wrong format, a bundle that does not fit the format.
var ErrRequest = errors.New("batch prediction: invalid request")

// ReasonPrefix starts the child process's line giving the reason of a
// failure (its exit codes are preprocess.ExitOK, ExitFailed and
// ExitRejected).
const ReasonPrefix = "batch prediction failed: "

// Plan is the shards of a run, written to WorkDir/plan.json.
type Plan struct {
	Shards int `json:"shards"`
}

// ShardStats are the counts of one committed shard.
type ShardStats struct {
	Shard       int              `json:"shard"`
	Predictions int64            `json:"predictions"`
	Errors      int64            `json:"errors"`
	Reasons     map[string]int64 `json:"reasons,omitempty"`
}

// ShardName returns the name of shard i of n of kind ("results" or
// "errors_stats").
func ShardName(kind string, i, n int) string {
	return fmt.Sprintf("prediction.%s-%05d-of-%05d", kind, i, n)
}

// StatsName is the name of shard i's counts in WorkDir.
func StatsName(i int) string { return fmt.Sprintf("shard-%05d.json", i) }

// PlanFile is the plan's name in WorkDir.
const PlanFile = "plan.json"

// Blocks plans the shards of r: byte ranges of the text inputs, or index
// ranges [Start, End) of the IDX images.
func (r *Request) Blocks() ([]preprocess.Block, error) {
	if len(r.Inputs) == 0 {
		return nil, fmt.Errorf("%w: no input files", ErrRequest)
	}
	if r.Format == FormatIDX {
		per := r.BlockImages
		if per <= 0 {
			per = DefaultBlockImages
		}
		var out []preprocess.Block
		for _, in := range r.Inputs {
			a, err := idx.ReadFile(in.Path)
			if err != nil {
				return nil, fmt.Errorf("%w: input %s: %w", ErrRequest, in.Name, err)
			}
			if len(a.Dims) < 2 {
				return nil, fmt.Errorf("%w: input %s: IDX array of %d dimensions is not an images file (want N×…)", ErrRequest, in.Name, len(a.Dims))
			}
			for s := 0; s < a.Dims[0]; s += per {
				out = append(out, preprocess.Block{Path: in.Path, Start: int64(s), End: int64(min(s+per, a.Dims[0]))})
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: the IDX inputs hold no images", ErrRequest)
		}
		for i := range out {
			out[i].Index, out[i].Of = i, len(out)
		}
		return out, nil
	}
	var total int64
	paths := make([]string, len(r.Inputs))
	for i, in := range r.Inputs {
		st, err := os.Stat(in.Path)
		if err != nil {
			return nil, fmt.Errorf("%w: input %s: %w", ErrRequest, in.Name, err)
		}
		if st.Size() == 0 {
			return nil, fmt.Errorf("%w: input %s is empty", ErrRequest, in.Name)
		}
		total += st.Size()
		paths[i] = in.Path
	}
	per := r.BlockBytes
	if per <= 0 {
		per = DefaultBlockBytes
	}
	bs, err := preprocess.PlanBlocks("batch", paths, int((total+per-1)/per))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRequest, err)
	}
	return bs, nil
}

// ShardDone reports whether shard i of n is committed: its results file
// (renamed last) and its counts exist.
func (r *Request) ShardDone(i, n int) bool {
	_, err1 := os.Stat(filepath.Join(r.OutDir, ShardName("results", i, n)))
	_, err2 := os.Stat(filepath.Join(r.WorkDir, StatsName(i)))
	return err1 == nil && err2 == nil
}

// ReadStats reads the counts of every committed shard in workDir, in
// shard order, and the plan.
func ReadStats(workDir string) (*Plan, []ShardStats, error) {
	b, err := os.ReadFile(filepath.Join(workDir, PlanFile))
	if err != nil {
		return nil, nil, err
	}
	var plan Plan
	if err := json.Unmarshal(b, &plan); err != nil {
		return nil, nil, fmt.Errorf("read plan: %w", err)
	}
	var out []ShardStats
	for i := range plan.Shards {
		b, err := os.ReadFile(filepath.Join(workDir, StatsName(i)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		var st ShardStats
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", StatsName(i), err)
		}
		out = append(out, st)
	}
	return &plan, out, nil
}

// Summary is the outcome of a run, summed over its committed shards.
type Summary struct {
	Shards      int              `json:"shards"`
	ShardsDone  int              `json:"shards_done"`
	Predictions int64            `json:"predictions"`
	Errors      int64            `json:"errors"`
	Reasons     map[string]int64 `json:"reasons,omitempty"`
}

// Summarize sums the counts of the shards committed in workDir.
func Summarize(workDir string) (Summary, error) {
	plan, stats, err := ReadStats(workDir)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Shards: plan.Shards, ShardsDone: len(stats), Reasons: map[string]int64{}}
	for _, st := range stats {
		s.Predictions += st.Predictions
		s.Errors += st.Errors
		for k, v := range st.Reasons {
			s.Reasons[k] += v
		}
	}
	return s, nil
}

// ShardFiles lists the names of the output shards of a plan of n shards,
// errors before results per shard, in order.
func ShardFiles(n int) []string {
	var out []string
	for i := range n {
		out = append(out, ShardName("errors_stats", i, n), ShardName("results", i, n))
	}
	return out
}
