package beampipe

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/trainflow/trainflow/preprocess"
)

func init() {
	beam.RegisterType(reflect.TypeOf(preprocess.Block{}))
	// Coders are registered by function name, so each type has its own
	// (not instances of one generic function, which share a name).
	beam.RegisterCoder(reflect.TypeOf(preprocess.Stats{}), encodeStats, decodeStats)
	beam.RegisterCoder(reflect.TypeOf(preprocess.ShardResult{}), encodeShard, decodeShard)
	beam.RegisterCoder(reflect.TypeOf(shardList{}), encodeShards, decodeShards)
	beam.RegisterCoder(reflect.TypeOf(preprocess.Manifest{}), encodeManifest, decodeManifest)
	register.DoFn2x1[preprocess.Block, func(preprocess.Stats), error](&analyzeFn{})
	register.Emitter1[preprocess.Stats]()
	register.Function2x1(mergeStats)
	register.DoFn1x2[preprocess.Stats, string, error](&fitFn{})
	register.DoFn2x2[preprocess.Block, string, preprocess.ShardResult, error](&transformFn{})
	register.Combiner3[shardList, preprocess.ShardResult, shardList](&collectShardsFn{})
	register.DoFn2x2[shardList, string, preprocess.Manifest, error](&manifestFn{})
}

// Pipeline adds the preprocessing of r to scope s:
//
//	train blocks ─ Analyze ─ Fit ─► transform (side input)
//	train+eval blocks ─ Transform(transform) ─ Manifest(transform)
//
// Each element is a block of rows, not a line, so the runner's per-element
// overhead is paid once per block. The outputs are the files in r.OutDir
// (see preprocess.Request); Pipeline returns the manifest's PCollection
// (one element).
func Pipeline(s beam.Scope, r *preprocess.Request) (beam.PCollection, error) {
	train, eval, err := r.Blocks()
	if err != nil {
		return beam.PCollection{}, err
	}
	s = s.Scope("Preprocess")
	trainBlocks := beam.CreateList(s, train)
	allBlocks := beam.CreateList(s, append(append([]preprocess.Block{}, train...), eval...))
	transform := Fit(s, r, Analyze(s, r.Schema, trainBlocks))
	shards := Transform(s, r.OutDir, r.Seed, r.MaxShardBytes, allBlocks, transform)
	return Manifest(s, r, shards, transform), nil
}

// Analyze returns the statistics of the rows of blocks
// (PCollection<preprocess.Block>) under schema, merged into one
// preprocess.Stats. The result does not depend on how the runner
// schedules or combines the blocks.
func Analyze(s beam.Scope, schema preprocess.Schema, blocks beam.PCollection) beam.PCollection {
	s = s.Scope("Analyze")
	partial := beam.ParDo(s, &analyzeFn{Schema: schema}, blocks)
	return beam.Combine(s.Scope("MergeStats"), mergeStats, partial)
}

// Fit fits r's Transform from stats (one preprocess.Stats), writes it to
// preprocess.TransformPath in r.OutDir and returns its JSON artifact (one
// string), the side input of Transform and Manifest.
func Fit(s beam.Scope, r *preprocess.Request, stats beam.PCollection) beam.PCollection {
	return beam.ParDo(s.Scope("Fit"), &fitFn{Request: *r}, stats)
}

// Transform applies the Transform artifact (a side input of one string)
// to every row of blocks and writes each block's shard (and its rejected
// rows) into outDir, shuffled by seed and the block's index. It returns
// one preprocess.ShardResult per block. A block whose shard would take
// more than maxBytes (if positive) fails the pipeline with
// preprocess.ErrShardBytes before its shard is written.
func Transform(s beam.Scope, outDir string, seed uint64, maxBytes int64, blocks, transform beam.PCollection) beam.PCollection {
	return beam.ParDo(s.Scope("Transform"), &transformFn{OutDir: outDir, Seed: seed, MaxBytes: maxBytes}, blocks, beam.SideInput{Input: transform})
}

// Manifest collects every shard's preprocess.ShardResult and writes r's
// manifest, the last file of a run, into r.OutDir. It returns the
// manifest (one preprocess.Manifest); a run with too many rejected rows
// has its Failure set.
func Manifest(s beam.Scope, r *preprocess.Request, shards, transform beam.PCollection) beam.PCollection {
	s = s.Scope("Manifest")
	all := beam.Combine(s.Scope("CollectShards"), &collectShardsFn{}, shards)
	return beam.ParDo(s, &manifestFn{Request: *r}, all, beam.SideInput{Input: transform})
}

// Run runs the pipeline of r on the runner named by Beam's --runner flag
// (prism, in-process, by default) and returns the manifest it wrote. ctx
// must not carry a deadline: prism panics on one.
func Run(ctx context.Context, r *preprocess.Request) (*preprocess.Manifest, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	p, s := beam.NewPipelineWithRoot()
	if _, err := Pipeline(s, r); err != nil {
		return nil, err
	}
	if err := beamx.Run(ctx, p); err != nil {
		return nil, fmt.Errorf("run pipeline: %w", err)
	}
	return preprocess.ReadManifest(r.OutDir)
}

// analyzeFn computes the statistics of one block.
type analyzeFn struct {
	Schema preprocess.Schema
}

func (f *analyzeFn) ProcessElement(b preprocess.Block, emit func(preprocess.Stats)) error {
	st, err := f.Schema.AnalyzeBlock(b)
	if err != nil {
		return err
	}
	emit(*st)
	return nil
}

func mergeStats(a, b preprocess.Stats) preprocess.Stats {
	a.Merge(&b)
	return a
}

// fitFn fits and writes the Transform.
type fitFn struct {
	Request preprocess.Request
}

func (f *fitFn) ProcessElement(st preprocess.Stats) (string, error) {
	_, b, err := f.Request.WriteTransform(&st)
	return string(b), err
}

// transformFn writes the shard of one block.
type transformFn struct {
	OutDir   string
	Seed     uint64
	MaxBytes int64

	t *preprocess.Transform
}

func (f *transformFn) ProcessElement(b preprocess.Block, artifact string) (preprocess.ShardResult, error) {
	if f.t == nil {
		t, err := preprocess.ParseTransform([]byte(artifact))
		if err != nil {
			return preprocess.ShardResult{}, err
		}
		f.t = t
	}
	return preprocess.TransformBlock(f.t, b, f.OutDir, f.Seed, f.MaxBytes)
}

// shardList is a mergeable list of shard results.
type shardList struct {
	Items []preprocess.ShardResult
}

// collectShardsFn collects shard results into one shardList.
type collectShardsFn struct{}

func (collectShardsFn) CreateAccumulator() shardList { return shardList{} }

func (collectShardsFn) AddInput(a shardList, r preprocess.ShardResult) shardList {
	a.Items = append(a.Items, r)
	return a
}

func (collectShardsFn) MergeAccumulators(a, b shardList) shardList {
	a.Items = append(a.Items, b.Items...)
	return a
}

func (collectShardsFn) ExtractOutput(a shardList) shardList { return a }

// manifestFn writes the manifest.
type manifestFn struct {
	Request preprocess.Request
}

func (f *manifestFn) ProcessElement(all shardList, artifact string) (preprocess.Manifest, error) {
	t, err := preprocess.ParseTransform([]byte(artifact))
	if err != nil {
		return preprocess.Manifest{}, err
	}
	m, err := f.Request.WriteManifest(t, all.Items)
	if err != nil {
		return preprocess.Manifest{}, err
	}
	return *m, nil
}

func encodeStats(v preprocess.Stats) ([]byte, error) { return json.Marshal(v) }

func decodeStats(b []byte) (preprocess.Stats, error) {
	var v preprocess.Stats
	err := json.Unmarshal(b, &v)
	return v, err
}

func encodeShard(v preprocess.ShardResult) ([]byte, error) { return json.Marshal(v) }

func decodeShard(b []byte) (preprocess.ShardResult, error) {
	var v preprocess.ShardResult
	err := json.Unmarshal(b, &v)
	return v, err
}

func encodeShards(v shardList) ([]byte, error) { return json.Marshal(v) }

func decodeShards(b []byte) (shardList, error) {
	var v shardList
	err := json.Unmarshal(b, &v)
	return v, err
}

func encodeManifest(v preprocess.Manifest) ([]byte, error) { return json.Marshal(v) }

func decodeManifest(b []byte) (preprocess.Manifest, error) {
	var v preprocess.Manifest
	err := json.Unmarshal(b, &v)
	return v, err
}
