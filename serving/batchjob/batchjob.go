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
// shard-iiiii.json per committed shard (its counts). The BatchPredict
// activity keeps Request.WorkDir in the output directory as WorkDirName
// (local outputs), writes the Request there as RequestFile, and writes
// ManifestFile (a Manifest) beside the shards after every shard. A shard is one block
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
	"slices"

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

// MaxShards bounds the shards of a run: each costs a model call batch,
// three files and a commit, so a tiny shard size (shard_images 1 on
// 60,000 images) would multiply the work and the files by the shard
// count. A plan over it is refused, naming the smallest size that fits.
const MaxShards = 10_000

// InflatedDir is the directory of WorkDir holding the uncompressed copies
// of gzip IDX inputs (see Blocks).
const InflatedDir = "inflated"

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

// ManifestFile is the manifest's name in the output directory,
// WorkDirName the directory there (local outputs) that is the run's
// Request.WorkDir: the request (RequestFile), the plan, the shards'
// counts and the child's log.
const (
	ManifestFile = "prediction.manifest.json"
	WorkDirName  = "_work"
	RequestFile  = "request.json"
)

// Manifest is the file ManifestFile of a batch prediction's output
// directory, written after every shard: readers trust the shards it
// lists (Files, ShardFiles of Shards).
type Manifest struct {
	JobID       string           `json:"job_id"`
	Bundle      string           `json:"bundle"`
	Model       string           `json:"model,omitempty"`
	Version     int64            `json:"version,omitempty"`
	Format      string           `json:"data_format"`
	Shards      int              `json:"shards"`
	Predictions int64            `json:"predictions"`
	Errors      int64            `json:"errors"`
	Reasons     map[string]int64 `json:"error_reasons,omitempty"`
	Files       []string         `json:"files"`
	// Failure is why the run failed although every shard was written
	// (too many rows could not be predicted); "" when it succeeded.
	Failure string `json:"failure,omitempty"`
}

// Marshal encodes m as ManifestFile holds it: indented JSON.
func (m Manifest) Marshal() []byte {
	b, _ := json.MarshalIndent(m, "", "  ") // no value of m fails to encode
	return b
}

// ParseManifest decodes the content of ManifestFile. The error never
// holds b.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("batch prediction: %s does not decode", ManifestFile)
	}
	return m, nil
}

// Blocks plans the shards of r: byte ranges of the text inputs, or index
// ranges [Start, End) of the IDX images. It reads only the inputs'
// headers, except that a gzip IDX input is decompressed once into
// WorkDir/InflatedDir (no further than its header declares; a copy an
// earlier attempt left is reused) and its Inputs entry then names the copy
// (Name is kept): a block reads only its own images. A plan of more than
// MaxShards shards is refused.
func (r *Request) Blocks() ([]preprocess.Block, error) {
	if len(r.Inputs) == 0 {
		return nil, fmt.Errorf("%w: no input files", ErrRequest)
	}
	if r.Format == FormatIDX {
		return r.idxBlocks()
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
	if n := (total + per - 1) / per; n > MaxShards {
		return nil, fmt.Errorf("%w: shard_bytes %d cuts the %d bytes of input into %d shards, more than %d: use shard_bytes ≥ %d",
			ErrRequest, per, total, n, MaxShards, (total+MaxShards-1)/MaxShards)
	}
	bs, err := preprocess.PlanBlocks("batch", paths, int((total+per-1)/per))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRequest, err)
	}
	return bs, nil
}

func (r *Request) idxBlocks() ([]preprocess.Block, error) {
	per := r.BlockImages
	if per <= 0 {
		per = DefaultBlockImages
	}
	heads := make([]idx.Header, len(r.Inputs))
	var images, shards int64
	for i, in := range r.Inputs {
		h, err := idx.ReadHeader(in.Path)
		if err != nil {
			return nil, fmt.Errorf("%w: input %s: %w", ErrRequest, in.Name, err)
		}
		if len(h.Dims) < 2 {
			return nil, fmt.Errorf("%w: input %s: IDX array of %d dimensions is not an images file (want N×…)", ErrRequest, in.Name, len(h.Dims))
		}
		heads[i] = h
		images += int64(h.Dims[0])
		shards += (int64(h.Dims[0]) + int64(per) - 1) / int64(per)
	}
	if images == 0 {
		return nil, fmt.Errorf("%w: the IDX inputs hold no images", ErrRequest)
	}
	if k := int64(len(r.Inputs)); shards > MaxShards {
		if k >= MaxShards {
			return nil, fmt.Errorf("%w: %d IDX input files make at least %d shards, more than %d", ErrRequest, k, k, MaxShards)
		}
		// Each file's last shard may be partial: ceil(images/(max-k))
		// images a shard always fits.
		return nil, fmt.Errorf("%w: shard_images %d cuts the %d images into %d shards, more than %d: use shard_images ≥ %d",
			ErrRequest, per, images, shards, MaxShards, (images+MaxShards-k-1)/(MaxShards-k))
	}
	for i, in := range r.Inputs {
		if !heads[i].Gzip {
			continue
		}
		if r.WorkDir == "" {
			return nil, fmt.Errorf("%w: work_dir is required to decompress input %s", ErrRequest, in.Name)
		}
		plain := filepath.Join(r.WorkDir, InflatedDir, fmt.Sprintf("input-%05d.idx", i))
		if h, err := idx.ReadHeader(plain); err == nil && slices.Equal(h.Dims, heads[i].Dims) {
			r.Inputs[i].Path = plain // an earlier attempt's
			continue
		}
		if err := os.MkdirAll(filepath.Dir(plain), 0o755); err != nil {
			return nil, err
		}
		if _, err := idx.Decompress(in.Path, plain); err != nil {
			if errors.Is(err, idx.ErrFormat) {
				return nil, fmt.Errorf("%w: input %s: %w", ErrRequest, in.Name, errors.Unwrap(err))
			}
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		r.Inputs[i].Path = plain
	}
	var out []preprocess.Block
	for i, in := range r.Inputs {
		for s := 0; s < heads[i].Dims[0]; s += per {
			out = append(out, preprocess.Block{Path: in.Path, Start: int64(s), End: int64(min(s+per, heads[i].Dims[0]))})
		}
	}
	for i := range out {
		out[i].Index, out[i].Of = i, len(out)
	}
	return out, nil
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
