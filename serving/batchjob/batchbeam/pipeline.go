// Package batchbeam is batch prediction's Beam pipeline: it reads raw
// rows (CSV, JSON Lines or IDX images), predicts them with a model bundle
// through serving.Batcher (the online server's own Transform, model and
// answer encoding) and writes sharded results and per-row errors in the
// layout of package serving/batchjob, which holds the request and the
// layout without Beam. The prediction server never imports this package.
// It runs in a child process of the BatchPredict activity (see ChildMain).
package batchbeam

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/trainflow/trainflow/preprocess/beampipe"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/serving/batchjob"
)

func init() {
	beam.RegisterType(reflect.TypeOf(preprocess.Block{}))
	beam.RegisterCoder(reflect.TypeOf(batchjob.ShardStats{}), encodeStats, decodeStats)
	register.DoFn3x1[context.Context, preprocess.Block, func(batchjob.ShardStats), error](&predictFn{})
	register.Emitter1[batchjob.ShardStats]()
}

// Pipeline adds the batch prediction of r's blocks to scope s and returns
// the counts of the shards it writes (see Predict).
func Pipeline(s beam.Scope, r *batchjob.Request, blocks []preprocess.Block) beam.PCollection {
	s = s.Scope("BatchPredict")
	return Predict(s, r, beam.CreateList(s, blocks))
}

// Predict predicts the rows of every block of blocks
// (PCollection<preprocess.Block>, planned by r.Blocks) with r's bundle and
// commits each block's shard (results, errors, counts) to r's directories.
// It returns the batchjob.ShardStats of each shard it wrote; a shard
// committed before (by an earlier attempt) is skipped and has none.
func Predict(s beam.Scope, r *batchjob.Request, blocks beam.PCollection) beam.PCollection {
	return beam.ParDo(s.Scope("Predict"), &predictFn{Req: *r}, blocks)
}

// Run plans r, writes the plan, removes temporary files an interrupted
// run left, and runs the pipeline on the runner of Beam's --runner flag
// (prism, in-process, by default). ctx must carry no deadline.
func Run(ctx context.Context, r *batchjob.Request) (*batchjob.Plan, error) {
	if err := check(r); err != nil {
		return nil, err
	}
	blocks, err := r.Blocks()
	if err != nil {
		return nil, err
	}
	plan := &batchjob.Plan{Shards: len(blocks)}
	for _, dir := range []string{r.OutDir, r.WorkDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := removeTemps(dir); err != nil {
			return nil, err
		}
	}
	b, _ := json.Marshal(plan)
	if err := atomicfile.Write(filepath.Join(r.WorkDir, batchjob.PlanFile), b); err != nil {
		return nil, err
	}
	var todo []preprocess.Block
	for _, bl := range blocks {
		if !r.ShardDone(bl.Index, bl.Of) {
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

// check validates r before any work starts: its format, directories and
// bundle.
func check(r *batchjob.Request) error {
	switch {
	case r.Format != batchjob.FormatCSV && r.Format != batchjob.FormatJSONL && r.Format != batchjob.FormatIDX:
		return fmt.Errorf("%w: format %q", batchjob.ErrRequest, r.Format)
	case r.OutDir == "" || r.WorkDir == "" || r.Bundle == "":
		return fmt.Errorf("%w: bundle, out_dir and work_dir are required", batchjob.ErrRequest)
	}
	sv, err := serving.Load("batch", 0, r.Bundle, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", batchjob.ErrRequest, err)
	}
	if r.Format == batchjob.FormatIDX {
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
		return "", fmt.Errorf("%w: data_format IDX needs a model with exactly one float_vector column, this one has %d", batchjob.ErrRequest, len(names))
	}
	return names[0], nil
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

// predictFn predicts one block and commits its shard.
type predictFn struct {
	Req batchjob.Request

	sv  *serving.Servable
	bat *serving.Batcher // scratch of the model calls, reused from block to block
	// IDX, reused from block to block: the pixel vectors of one model
	// call, and the row of an image before its pixels (see idxBlock).
	vecs     [][]float64
	template []preprocess.Value
}

func (f *predictFn) Setup() error {
	sv, err := serving.Load("batch", 0, f.Req.Bundle, nil)
	if err != nil {
		return fmt.Errorf("load bundle: %w", err)
	}
	f.sv, f.bat = sv, sv.NewBatcher()
	return nil
}

func (f *predictFn) ProcessElement(ctx context.Context, b preprocess.Block, emit func(batchjob.ShardStats)) error {
	if f.Req.ShardDone(b.Index, b.Of) {
		return nil
	}
	name := b.Path
	for _, in := range f.Req.Inputs {
		if in.Path == b.Path {
			name = in.Name
			break
		}
	}
	w := &shardWriter{r: &f.Req, f: f, sv: f.sv, bat: f.bat, input: name, stats: batchjob.ShardStats{Shard: b.Index, Reasons: map[string]int64{}}}
	w.batch = f.Req.BatchSize
	if w.batch <= 0 {
		w.batch = batchjob.DefaultBatchSize
	}
	var err error
	if f.Req.Format == batchjob.FormatIDX {
		err = w.idxBlock(b)
	} else {
		err = w.textBlock(b)
	}
	if err != nil {
		return err
	}
	if err := w.commit(b.Index, b.Of); err != nil {
		return err
	}
	emit(w.stats)
	return nil
}

// shardWriter predicts the rows of one block into memory.
type shardWriter struct {
	r     *batchjob.Request
	sv    *serving.Servable
	bat   *serving.Batcher
	input string
	batch int
	// keyField is "line" or "index".
	keyField string
	keys     []int64 // keys of the rows pending in bat
	f        *predictFn
	results  []byte
	errs     []byte
	stats    batchjob.ShardStats
}

func (w *shardWriter) textBlock(b preprocess.Block) error {
	w.keyField = "line"
	data, base, err := preprocess.ReadBlock(b)
	if le := (*preprocess.LineTooLongError)(nil); errors.As(err, &le) {
		return fmt.Errorf("%w: input %s: the line at byte offset %d is longer than %d bytes", batchjob.ErrRequest, w.input, le.Offset, preprocess.MaxLineBytes)
	}
	if err != nil {
		return err
	}
	s := &w.sv.Transform.Schema
	csvp := s.CSVPredictionParser()
	csv := w.r.Format == batchjob.FormatCSV
	err = s.DataLines(b, data, base, csv && s.Header, func(line string, num int64) error {
		row := w.bat.Row(len(w.keys))
		var err error
		if csv {
			err = csvp.Parse(row, line)
		} else {
			err = parseJSONInstance(s, row, line)
		}
		if err != nil {
			w.reject(num, err)
			return nil
		}
		w.keys = append(w.keys, num)
		if len(w.keys) == w.batch {
			return w.flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return w.flush()
}

func (w *shardWriter) idxBlock(b preprocess.Block) error {
	w.keyField = "index"
	// Blocks left b.Path uncompressed: read only this block's images.
	h, err := idx.ReadHeader(b.Path)
	if err != nil {
		return fmt.Errorf("%w: input %s: %w", batchjob.ErrRequest, w.input, err)
	}
	col, err := vectorColumn(w.sv.Transform.Schema)
	if err != nil {
		return err
	}
	size := 1
	for _, d := range h.Dims[1:] {
		size *= d
	}
	// Each image is the instance {"<col>": [pixels]}: the row the server
	// parses from it is the template (every other column at its default,
	// as for an instance without it) with the pixels as float64s, which
	// is what parsing their JSON integers gives.
	ci := slices.IndexFunc(w.sv.Transform.Schema.Columns, func(c preprocess.Column) bool { return c.Name == col })
	if l := w.sv.Transform.Schema.Columns[ci].Length; l != size {
		return fmt.Errorf("%w: input %s: images of %d values, the model's column %s takes %d", batchjob.ErrRequest, w.input, size, col, l)
	}
	data, err := idx.ReadValues(b.Path, h, b.Start*int64(size), b.End*int64(size))
	if err != nil {
		return fmt.Errorf("%w: input %s: %w", batchjob.ErrRequest, w.input, err)
	}
	template := w.f.template
	if template == nil {
		zeros := "[" + strings.Repeat("0,", size-1) + "0]"
		template = make([]preprocess.Value, len(w.sv.Transform.Schema.Columns))
		if err := w.sv.Transform.Schema.ParseInstance(template, map[string]json.RawMessage{col: json.RawMessage(zeros)}); err != nil {
			return fmt.Errorf("%w: the model needs more than its image column: %w", batchjob.ErrRequest, err)
		}
		w.f.template = template
	}
	vecs := w.f.vecs
	if n := int(min(int64(w.batch), b.End-b.Start)); len(vecs) < n {
		vecs = make([][]float64, n)
		for i := range vecs {
			vecs[i] = make([]float64, size)
		}
		w.f.vecs = vecs
	}
	for i := b.Start; i < b.End; i++ {
		img := data[int(i-b.Start)*size : int(i-b.Start+1)*size]
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
	if err := atomicfile.Write(filepath.Join(w.r.OutDir, batchjob.ShardName("errors_stats", i, n)), w.errs); err != nil {
		return err
	}
	sb, _ := json.Marshal(w.stats)
	if err := atomicfile.Write(filepath.Join(w.r.WorkDir, batchjob.StatsName(i)), sb); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(w.r.OutDir, batchjob.ShardName("results", i, n)), w.results)
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

// child is `trainflow batch-predict REQUEST.json [beam flags]`.
var child = beampipe.Child[batchjob.Request]{
	Usage:        "trainflow batch-predict REQUEST.json [beam pipeline flags]",
	ReasonPrefix: batchjob.ReasonPrefix,
	Rejections:   []error{batchjob.ErrRequest},
	Run: func(ctx context.Context, r *batchjob.Request) error {
		_, err := Run(ctx, r)
		return err
	},
}

// ChildMain is the body of `trainflow batch-predict REQUEST.json [beam
// flags]`: it runs the pipeline of the request (see Run) and returns an
// exit code (see beampipe.Child).
func ChildMain(ctx context.Context, args []string, stderr io.Writer) int {
	return child.Main(ctx, args, stderr)
}

func encodeStats(v batchjob.ShardStats) ([]byte, error) { return json.Marshal(v) }

func decodeStats(b []byte) (batchjob.ShardStats, error) {
	var v batchjob.ShardStats
	err := json.Unmarshal(b, &v)
	return v, err
}
