// Package batchjob is batch prediction's Beam pipeline: it reads raw rows
// (CSV, JSON Lines or IDX images), predicts them with a model bundle
// through serving.Batcher (the online server's own Transform, model and
// answer encoding) and writes sharded results and per-row errors.
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
// written identically. The prediction server never imports this package
// (it is where Beam is).
package batchjob

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/idx"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/serving"
)

func init() {
	beam.RegisterType(reflect.TypeOf(preprocess.Block{}))
	register.DoFn2x1[context.Context, preprocess.Block, error](&predictFn{})
}

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

// blocks plans the shards of r: byte ranges of the text inputs, or index
// ranges [Start, End) of the IDX images.
func (r *Request) blocks() ([]preprocess.Block, error) {
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

// Pipeline adds the batch prediction of r's blocks to scope s: one
// predictFn element per block, each writing its own shard.
func Pipeline(s beam.Scope, r *Request, blocks []preprocess.Block) {
	s = s.Scope("BatchPredict")
	beam.ParDo0(s.Scope("Predict"), &predictFn{Req: *r}, beam.CreateList(s, blocks))
}

// Run plans r, writes the plan, removes temporary files an interrupted
// run left, and runs the pipeline on the runner of Beam's --runner flag
// (prism, in-process, by default). ctx must carry no deadline.
func Run(ctx context.Context, r *Request) (*Plan, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	blocks, err := r.blocks()
	if err != nil {
		return nil, err
	}
	plan := &Plan{Shards: len(blocks)}
	for _, dir := range []string{r.OutDir, r.WorkDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := removeTemps(dir); err != nil {
			return nil, err
		}
	}
	b, _ := json.Marshal(plan)
	if err := atomicfile.Write(filepath.Join(r.WorkDir, PlanFile), b); err != nil {
		return nil, err
	}
	var todo []preprocess.Block
	for _, bl := range blocks {
		if !shardDone(r, bl.Index, bl.Of) {
			todo = append(todo, bl)
		}
	}
	if len(todo) == 0 {
		return plan, nil
	}
	p, s := beam.NewPipelineWithRoot()
	Pipeline(s, r, todo)
	if err := beamx.Run(ctx, p); err != nil {
		return nil, fmt.Errorf("run pipeline: %w", err)
	}
	return plan, nil
}

func (r *Request) check() error {
	switch {
	case r.Format != FormatCSV && r.Format != FormatJSONL && r.Format != FormatIDX:
		return fmt.Errorf("%w: format %q", ErrRequest, r.Format)
	case r.OutDir == "" || r.WorkDir == "" || r.Bundle == "":
		return fmt.Errorf("%w: bundle, out_dir and work_dir are required", ErrRequest)
	}
	sv, err := serving.Load("batch", 0, r.Bundle)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRequest, err)
	}
	if r.Format == FormatIDX {
		if _, err := vectorColumn(sv.Transform.Schema); err != nil {
			return err
		}
	}
	return nil
}

// vectorColumn is the float_vector column an IDX image fills.
func vectorColumn(s preprocess.Schema) (string, error) {
	var names []string
	for _, c := range s.Columns {
		if c.Type == preprocess.TypeFloatVector && c.Name != s.Label {
			names = append(names, c.Name)
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("%w: data_format IDX needs a model with exactly one float_vector column, this one has %d", ErrRequest, len(names))
	}
	return names[0], nil
}

// shardDone reports whether shard i of n is committed: its results file
// (renamed last) and its counts exist.
func shardDone(r *Request, i, n int) bool {
	_, err1 := os.Stat(filepath.Join(r.OutDir, ShardName("results", i, n)))
	_, err2 := os.Stat(filepath.Join(r.WorkDir, StatsName(i)))
	return err1 == nil && err2 == nil
}

// removeTemps deletes the temporary files (atomicfile's ".name.tmp-*") an
// interrupted run left in dir.
func removeTemps(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
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

// predictFn predicts one block and commits its shard.
type predictFn struct {
	Req Request

	sv *serving.Servable
}

func (f *predictFn) Setup() error {
	sv, err := serving.Load("batch", 0, f.Req.Bundle)
	if err != nil {
		return fmt.Errorf("load bundle: %w", err)
	}
	f.sv = sv
	return nil
}

func (f *predictFn) ProcessElement(ctx context.Context, b preprocess.Block) error {
	if shardDone(&f.Req, b.Index, b.Of) {
		return nil
	}
	name := b.Path
	for _, in := range f.Req.Inputs {
		if in.Path == b.Path {
			name = in.Name
			break
		}
	}
	w := &shardWriter{r: &f.Req, sv: f.sv, bat: f.sv.NewBatcher(), input: name, stats: ShardStats{Shard: b.Index, Reasons: map[string]int64{}}}
	w.batch = f.Req.BatchSize
	if w.batch <= 0 {
		w.batch = DefaultBatchSize
	}
	var err error
	if f.Req.Format == FormatIDX {
		err = w.idxBlock(b)
	} else {
		err = w.textBlock(b)
	}
	if err != nil {
		return err
	}
	return w.commit(b.Index, b.Of)
}

// shardWriter predicts the rows of one block into memory.
type shardWriter struct {
	r     *Request
	sv    *serving.Servable
	bat   *serving.Batcher
	input string
	batch int
	// keyField is "line" or "index".
	keyField string
	keys     []int64 // keys of the rows pending in bat
	results  []byte
	errs     []byte
	stats    ShardStats
}

func (w *shardWriter) textBlock(b preprocess.Block) error {
	w.keyField = "line"
	data, base, err := preprocess.ReadBlock(b)
	if err != nil {
		return err
	}
	s := &w.sv.Transform.Schema
	csvp := s.CSVPredictionParser()
	for pos, num := 0, b.FirstLine; pos < len(data); num++ {
		end := strings.IndexByte(data[pos:], '\n')
		next := len(data)
		if end < 0 {
			end = len(data)
		} else {
			end += pos
			next = end + 1
		}
		line := strings.TrimRight(data[pos:end], "\r")
		skip := strings.TrimSpace(line) == "" ||
			(w.r.Format == FormatCSV && s.Header && base+int64(pos) == 0) ||
			(s.CommentPrefix != "" && strings.HasPrefix(line, s.CommentPrefix))
		pos = next
		if skip {
			continue
		}
		row := w.bat.Row(len(w.keys))
		if w.r.Format == FormatCSV {
			err = csvp.Parse(row, line)
		} else {
			err = parseJSONInstance(s, row, line)
		}
		if err != nil {
			w.reject(num, err)
			continue
		}
		w.keys = append(w.keys, num)
		if len(w.keys) == w.batch {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return w.flush()
}

func (w *shardWriter) idxBlock(b preprocess.Block) error {
	w.keyField = "index"
	a, err := idx.ReadFile(b.Path)
	if err != nil {
		return fmt.Errorf("%w: input %s: %w", ErrRequest, w.input, err)
	}
	col, err := vectorColumn(w.sv.Transform.Schema)
	if err != nil {
		return err
	}
	size := 1
	for _, d := range a.Dims[1:] {
		size *= d
	}
	// Each image is the instance {"<col>": [pixels]}: the row the server
	// parses from it is the template (every other column at its default,
	// as for an instance without it) with the pixels as float64s, which
	// is what parsing their JSON integers gives.
	ci := slices.IndexFunc(w.sv.Transform.Schema.Columns, func(c preprocess.Column) bool { return c.Name == col })
	if l := w.sv.Transform.Schema.Columns[ci].Length; l != size {
		return fmt.Errorf("%w: input %s: images of %d values, the model's column %s takes %d", ErrRequest, w.input, size, col, l)
	}
	zeros := "[" + strings.Repeat("0,", size-1) + "0]"
	template := make([]preprocess.Value, len(w.sv.Transform.Schema.Columns))
	if err := w.sv.Transform.Schema.ParseInstance(template, map[string]json.RawMessage{col: json.RawMessage(zeros)}); err != nil {
		return fmt.Errorf("%w: the model needs more than its image column: %w", ErrRequest, err)
	}
	vecs := make([][]float64, w.batch)
	for i := range vecs {
		vecs[i] = make([]float64, size)
	}
	for i := b.Start; i < b.End; i++ {
		img := a.Data[int(i)*size : int(i+1)*size]
		slot := len(w.keys)
		row := w.bat.Row(slot)
		copy(row, template)
		for j, v := range img {
			vecs[slot][j] = float64(v)
		}
		row[ci] = preprocess.Value{Vec: vecs[slot]}
		w.keys = append(w.keys, i)
		if len(w.keys) == w.batch {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return w.flush()
}

// flush predicts the pending rows and appends their results.
func (w *shardWriter) flush() error {
	n := len(w.keys)
	if n == 0 {
		return nil
	}
	if err := w.bat.Predict(n); err != nil {
		return err
	}
	for i, key := range w.keys {
		if w.bat.Overflowed(i) {
			w.rejectReason(key, "overflow", "", "feature values are too large for this model (its output overflows)")
			continue
		}
		w.results = w.appendKey(w.results, key)
		w.results = append(w.results, `,"prediction":`...)
		w.results = w.bat.AppendPrediction(w.results, i)
		w.results = append(w.results, "}\n"...)
		w.stats.Predictions++
	}
	w.keys = w.keys[:0]
	return nil
}

func (w *shardWriter) appendKey(b []byte, key int64) []byte {
	b = append(b, `{"input":`...)
	q, _ := json.Marshal(w.input)
	b = append(b, q...)
	b = append(b, `,"`...)
	b = append(b, w.keyField...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, key, 10)
}

// reject records a row that could not be parsed. The message names the
// reason and the schema column, never the row's values.
func (w *shardWriter) reject(key int64, err error) {
	var re *preprocess.RowError
	if !errors.As(err, &re) {
		w.rejectReason(key, "error", "", "cannot parse the row")
		return
	}
	col := re.Column
	if re.Reason == preprocess.ReasonUnknownField || (col != "" && !hasColumn(w.sv.Transform.Schema, col)) {
		col = "" // a key of the row itself: row content
	}
	w.rejectReason(key, re.Reason, col, describe(re))
}

func hasColumn(s preprocess.Schema, name string) bool {
	for _, c := range s.Columns {
		if c.Name == name {
			return true
		}
	}
	return false
}

// describe says what is wrong with a row without quoting its values.
func describe(re *preprocess.RowError) string {
	switch re.Reason {
	case preprocess.ReasonColumnCount:
		if strings.HasSuffix(re.Detail, "columns") || strings.Contains(re.Detail, " columns, want ") {
			return re.Detail // counts only
		}
		return "unparsable CSV row"
	case preprocess.ReasonBadNumber:
		return "not a (finite) number"
	case preprocess.ReasonMissing:
		return "missing value and no default"
	case preprocess.ReasonWrongType:
		return "wrong JSON type for this column"
	case preprocess.ReasonUnknownField:
		return "a field that is not a feature of this model"
	case preprocess.ReasonBadJSON:
		return "not a JSON object"
	case preprocess.ReasonWrongLength:
		return "wrong number of elements for this vector column"
	}
	return re.Reason
}

func (w *shardWriter) rejectReason(key int64, reason, column, msg string) {
	w.errs = w.appendKey(w.errs, key)
	w.errs = append(w.errs, `,"reason":`...)
	q, _ := json.Marshal(reason)
	w.errs = append(w.errs, q...)
	if column != "" {
		w.errs = append(w.errs, `,"column":`...)
		q, _ = json.Marshal(column)
		w.errs = append(w.errs, q...)
	}
	w.errs = append(w.errs, `,"error":`...)
	if column != "" {
		msg = column + ": " + msg
	}
	q, _ = json.Marshal(msg)
	w.errs = append(w.errs, q...)
	w.errs = append(w.errs, "}\n"...)
	w.stats.Errors++
	w.stats.Reasons[reason]++
}

// commit writes shard i of n: errors and counts first, results (the
// commit point) last, each to a temporary name renamed into place.
func (w *shardWriter) commit(i, n int) error {
	if err := atomicfile.Write(filepath.Join(w.r.OutDir, ShardName("errors_stats", i, n)), w.errs); err != nil {
		return err
	}
	sb, _ := json.Marshal(w.stats)
	if err := atomicfile.Write(filepath.Join(w.r.WorkDir, StatsName(i)), sb); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(w.r.OutDir, ShardName("results", i, n)), w.results)
}

// parseJSONInstance parses one JSON Lines instance into dst as the
// prediction server parses an instance.
func parseJSONInstance(s *preprocess.Schema, dst []preprocess.Value, line string) error {
	var inst map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &inst); err != nil || inst == nil {
		return &preprocess.RowError{Reason: preprocess.ReasonBadJSON, Detail: "not a JSON object"}
	}
	return s.ParseInstance(dst, inst)
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

// ExitRejected is ChildMain's exit code for a request no retry can fix.
const ExitRejected = 3

// ReasonPrefix starts ChildMain's line giving the reason of a failure.
const ReasonPrefix = "batch prediction failed: "

// ChildMain is the body of `trainflow batch-predict REQUEST.json [beam
// flags]`: it runs the pipeline of the request and returns an exit code.
func ChildMain(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stderr, "usage: trainflow batch-predict REQUEST.json [beam pipeline flags]")
		return ExitRejected
	}
	if err := flag.CommandLine.Parse(args[1:]); err != nil {
		fmt.Fprintf(stderr, "%sbeam flags: %v\n", ReasonPrefix, err)
		return ExitRejected
	}
	if err := preprocess.DefaultWorkerBinary(); err != nil {
		fmt.Fprintf(stderr, "%sbeam flags: %v\n", ReasonPrefix, err)
		return 1
	}
	beam.Init()
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "%sread request: %v\n", ReasonPrefix, err)
		return ExitRejected
	}
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		fmt.Fprintf(stderr, "%sread request %s: %v\n", ReasonPrefix, args[0], err)
		return ExitRejected
	}
	if _, err := Run(ctx, &r); err != nil {
		fmt.Fprintln(stderr, ReasonPrefix+err.Error())
		if errors.Is(err, ErrRequest) || strings.Contains(err.Error(), ErrRequest.Error()) {
			return ExitRejected
		}
		return 1
	}
	return 0
}
