package preprocess

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// Request is everything one preprocessing run needs. It is written as JSON
// by the preprocess activity and read by the child process.
type Request struct {
	Schema Schema   `json:"schema"`
	Train  []string `json:"train"`
	Eval   []string `json:"eval"`
	// OutDir is the job directory: the run writes TransformPath,
	// DataDir/<shards> and, last, ManifestPath inside it.
	OutDir      string `json:"out_dir"`
	TrainShards int    `json:"train_shards"`
	EvalShards  int    `json:"eval_shards"`
	// Seed seeds the shuffle of every shard.
	Seed uint64 `json:"seed"`
	// MaxBadFraction fails the run when more than this fraction of the
	// rows of either split are rejected.
	MaxBadFraction float64 `json:"max_bad_fraction"`
	// MaxShardBytes, if positive, bounds the bytes of the shards the run
	// writes (ShardBytes of the train and eval rows together): the run
	// is checked once the Transform is fitted, before the Transform or any
	// shard is written (the eval split's rows counted by reading its
	// blocks), and every block again before its shard is; a run over it
	// fails with ErrShardBytes. The worker sets it (its --max-shard-bytes).
	MaxShardBytes int64 `json:"max_shard_bytes,omitempty"`
}

// Paths inside the job directory.
const (
	TransformPath = "transform/transform.json"
	DataDir       = "data"
	ManifestPath  = "data/manifest.json"
)

// Manifest records the outcome of a preprocessing run. It is written last:
// its presence means every shard and the Transform are complete.
type Manifest struct {
	TransformHash string           `json:"transform_hash"`
	Dim           int              `json:"dim"`
	Classes       int              `json:"classes"`
	Seed          uint64           `json:"seed"`
	TrainRows     int64            `json:"train_rows"`
	EvalRows      int64            `json:"eval_rows"`
	Train         []ShardResult    `json:"train"`
	Eval          []ShardResult    `json:"eval"`
	Bad           map[string]int64 `json:"bad,omitempty"`
	BadExamples   []BadRecord      `json:"bad_examples,omitempty"`
	// Failure is set when the run produced its outputs but must not be
	// used, e.g. too many rejected rows.
	Failure string `json:"failure,omitempty"`
}

// ErrRequest is wrapped by errors that no retry can fix: a bad schema,
// missing or empty inputs, a header without a schema column.
var ErrRequest = errors.New("preprocess: invalid request")

// Check validates r and its input files before any work starts.
func (r *Request) Check() error {
	if err := r.Schema.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrRequest, err)
	}
	if r.OutDir == "" {
		return fmt.Errorf("%w: no output directory", ErrRequest)
	}
	if r.TrainShards < 1 || r.EvalShards < 1 {
		return fmt.Errorf("%w: shard counts must be positive, got train %d, eval %d", ErrRequest, r.TrainShards, r.EvalShards)
	}
	if r.MaxBadFraction < 0 || r.MaxBadFraction > 1 {
		return fmt.Errorf("%w: max_bad_fraction %v is not in [0,1]", ErrRequest, r.MaxBadFraction)
	}
	for _, split := range [][]string{r.Train, r.Eval} {
		if len(split) == 0 {
			return fmt.Errorf("%w: no train or no eval files", ErrRequest)
		}
		if r.Schema.format() == FormatIDX {
			if err := r.Schema.checkIDX(split); err != nil {
				return err
			}
		}
		for _, f := range split {
			st, err := os.Stat(f)
			if err != nil {
				return fmt.Errorf("%w: input %s: %w", ErrRequest, f, err)
			}
			if st.Size() == 0 {
				return fmt.Errorf("%w: input %s is empty", ErrRequest, f)
			}
			if r.Schema.Header && r.Schema.format() == FormatCSV {
				cols, err := HeaderColumns(f)
				if err != nil {
					return fmt.Errorf("%w: input %s: %w", ErrRequest, f, err)
				}
				if err := r.Schema.checkHeader(f, cols); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Blocks plans the train and eval blocks of r: TrainShards and EvalShards
// blocks (fewer for small inputs), in shard order.
func (r *Request) Blocks() (train, eval []Block, err error) {
	if r.Schema.format() == FormatIDX {
		if train, err = planIDXBlocks(SplitTrain, r.Train, r.TrainShards); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrRequest, err)
		}
		if eval, err = planIDXBlocks(SplitEval, r.Eval, r.EvalShards); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrRequest, err)
		}
		return train, eval, nil
	}
	if train, err = PlanBlocks(SplitTrain, r.Train, r.TrainShards); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrRequest, err)
	}
	if eval, err = PlanBlocks(SplitEval, r.Eval, r.EvalShards); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrRequest, err)
	}
	return train, eval, nil
}

// WriteTransform fits the Transform from merged statistics, writes it
// atomically to TransformPath in OutDir and returns it with its JSON.
func (r *Request) WriteTransform(st *Stats) (*Transform, []byte, error) {
	if st.Rows == 0 {
		return nil, nil, r.noValidRows(st)
	}
	t, err := Fit(r.Schema, st)
	if err != nil {
		return nil, nil, fmt.Errorf("fit on %s: %w", strings.Join(r.Train, ", "), err)
	}
	if r.MaxShardBytes > 0 {
		// The whole run's shards, train and eval, before any is written
		// (and before the Transform is, so a refused run leaves nothing).
		if err := checkShardBytes(t, st.Rows, r.MaxShardBytes, "the train split"); err != nil {
			return nil, nil, err
		}
		evalRows, err := r.evalRows()
		if err != nil {
			return nil, nil, err
		}
		if err := checkShardBytes(t, st.Rows+evalRows, r.MaxShardBytes, fmt.Sprintf("the train and eval splits (%d + %d rows)", st.Rows, evalRows)); err != nil {
			return nil, nil, err
		}
	}
	b, err := t.Marshal()
	if err != nil {
		return nil, nil, err
	}
	if err := atomicfile.Write(filepath.Join(r.OutDir, TransformPath), b); err != nil {
		return nil, nil, err
	}
	return t, b, nil
}

// noValidRows is the error of a run whose training rows were all
// rejected (st, their statistics, counts them by reason): nothing can be
// fitted, so no shard is written, but every rejected row is, with its
// file, line and reason, to BadRecordsDir as TransformBlock writes them,
// and the error gives the counts by reason and where the rows are.
func (r *Request) noValidRows(st *Stats) error {
	var total int64
	for _, n := range st.Bad {
		total += n
	}
	files := strings.Join(r.Train, ", ")
	if total == 0 {
		return fmt.Errorf("fit on %s: %w: no valid training rows: the train data holds no rows", files, ErrTransform)
	}
	written, werr := r.writeRejected()
	where := fmt.Sprintf("every rejected row, with its file, line and reason, is in %s/ of the job directory", BadRecordsDir)
	if werr != nil {
		where = fmt.Sprintf("%d rejected rows written to %s/ before: %v", written, BadRecordsDir, werr)
	}
	return fmt.Errorf("fit on %s: %w: no valid training rows: all %d rows rejected (%s); %s", files, ErrTransform, total, reasonCounts(st.Bad), where)
}

// writeRejected writes the rejected rows of r's train blocks to
// BadRecordsDir, each block's to the file its shard's would go to, and
// returns how many it wrote.
func (r *Request) writeRejected() (int64, error) {
	train, _, err := r.Blocks()
	if err != nil {
		return 0, err
	}
	var n int64
	row := make([]Value, len(r.Schema.Columns))
	for _, b := range train {
		err := func() error {
			src, release, err := r.Schema.openRows(b, true)
			defer release()
			if err != nil {
				return err
			}
			bad := &badWriter{path: filepath.Join(r.OutDir, badPath(ShardName(b.Split, b.Index, b.Of)))}
			defer bad.abort()
			for k := range src.len() {
				perr := src.parse(k, row)
				if perr == nil {
					continue
				}
				if err := bad.write(badRecord(src, k, b.Path, perr)); err != nil {
					return err
				}
				n++
			}
			return bad.commit()
		}()
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// WriteManifest builds the manifest from the results of every shard (in
// any order) and writes it to ManifestPath in OutDir: the last write of a
// run. A run with too many rejected rows gets a manifest whose Failure says
// so, and no error.
func (r *Request) WriteManifest(t *Transform, shards []ShardResult) (*Manifest, error) {
	m := &Manifest{TransformHash: t.Hash, Dim: t.Dim, Classes: t.Classes(), Seed: r.Seed}
	slices.SortFunc(shards, func(a, b ShardResult) int { return strings.Compare(a.Name, b.Name) })
	var bad [2]int64
	for _, s := range shards {
		i := 0
		if s.Split == SplitTrain {
			m.Train = append(m.Train, s)
			m.TrainRows += s.Rows
		} else {
			i = 1
			m.Eval = append(m.Eval, s)
			m.EvalRows += s.Rows
		}
		for k, n := range s.Bad {
			if m.Bad == nil {
				m.Bad = map[string]int64{}
			}
			m.Bad[k] += n
			bad[i] += n
		}
		for _, e := range s.BadExamples {
			if len(m.BadExamples) < maxBadExamples {
				m.BadExamples = append(m.BadExamples, e)
			}
		}
	}
	for i, rows := range []int64{m.TrainRows, m.EvalRows} {
		split := []string{SplitTrain, SplitEval}[i]
		total := rows + bad[i]
		if total == 0 {
			m.Failure = fmt.Sprintf("no rows in the %s data", split)
			continue
		}
		if frac := float64(bad[i]) / float64(total); frac > r.MaxBadFraction {
			m.Failure = fmt.Sprintf("%d of %d %s rows rejected (%.4f > max_bad_fraction %v): %s", bad[i], total, split, frac, r.MaxBadFraction, reasonCounts(m.Bad))
		}
	}
	if f := emptyFile(shards); f != "" {
		m.Failure = fmt.Sprintf("input %s has no valid rows (every row was rejected: see %s in the job directory)", f, BadRecordsDir)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(r.OutDir, ManifestPath), append(b, '\n')); err != nil {
		return nil, err
	}
	return m, nil
}

// emptyFile returns the first input file (by shard order) of which no row
// was valid, or "". Such a file is not data with a few bad records, it is
// the wrong file: it fails the run whatever max_bad_fraction allows.
func emptyFile(shards []ShardResult) string {
	rows := map[string]int64{}
	var files []string
	for _, s := range shards {
		if s.File == "" {
			continue
		}
		if _, ok := rows[s.File]; !ok {
			files = append(files, s.File)
		}
		rows[s.File] += s.Rows
	}
	for _, f := range files {
		if rows[f] == 0 {
			return f
		}
	}
	return ""
}

// ReadManifest reads the manifest of a completed run in jobDir.
func ReadManifest(jobDir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(jobDir, ManifestPath))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return ParseManifest(b)
}

// ParseManifest decodes a manifest's bytes (ManifestPath of a job
// directory, wherever it is stored).
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", ManifestPath, err)
	}
	return &m, nil
}

// ReadTransform reads and verifies the Transform artifact in jobDir.
func ReadTransform(jobDir string) (*Transform, []byte, error) {
	b, err := os.ReadFile(filepath.Join(jobDir, TransformPath))
	if err != nil {
		return nil, nil, fmt.Errorf("read transform: %w", err)
	}
	t, err := ParseTransform(b)
	if err != nil {
		return nil, nil, fmt.Errorf("read transform: %w", err)
	}
	return t, b, nil
}

// RunLocal runs the same analyze and transform as the Beam pipeline
// (package preprocess/beampipe) in a plain loop on one goroutine. It is the baseline the pipeline is measured
// against and a reference in tests.
func RunLocal(r *Request) (*Manifest, error) {
	defer RemoveInflated()
	if err := r.Check(); err != nil {
		return nil, err
	}
	train, eval, err := r.Blocks()
	if err != nil {
		return nil, err
	}
	os.Remove(filepath.Join(r.OutDir, ManifestPath))
	st := NewStats(&r.Schema)
	for _, b := range train {
		p, err := r.Schema.AnalyzeBlock(b)
		if err != nil {
			return nil, err
		}
		st.Merge(p)
	}
	t, _, err := r.WriteTransform(st)
	if err != nil {
		return nil, err
	}
	var shards []ShardResult
	for _, b := range append(train, eval...) {
		s, err := TransformBlock(t, b, r.OutDir, r.Seed, r.MaxShardBytes)
		if err != nil {
			return nil, err
		}
		shards = append(shards, s)
	}
	return r.WriteManifest(t, shards)
}

// reasonCounts lists rejected rows by reason, most frequent first, as
// "column_count 40, bad_number 3".
func reasonCounts(bad map[string]int64) string {
	reasons := slices.Collect(maps.Keys(bad))
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Or(cmp.Compare(bad[b], bad[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %d", r, bad[r])
	}
	return strings.Join(parts, ", ")
}
