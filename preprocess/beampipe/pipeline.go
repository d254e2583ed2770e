package beampipe

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/trainflow/trainflow/preprocess"
)

func init() {
	beam.RegisterType(reflect.TypeOf(preprocess.Block{}))
	beam.RegisterType(reflect.TypeOf(work{}))
	// Coders are registered by function name, so each type has its own
	// (not instances of one generic function, which share a name).
	beam.RegisterCoder(reflect.TypeOf(preprocess.Stats{}), encodeStats, decodeStats)
	beam.RegisterCoder(reflect.TypeOf(preprocess.ShardResult{}), encodeShard, decodeShard)
	beam.RegisterCoder(reflect.TypeOf(shardList{}), encodeShards, decodeShards)
	beam.RegisterCoder(reflect.TypeOf(preprocess.Manifest{}), encodeManifest, decodeManifest)
	register.DoFn3x1[context.Context, preprocess.Block, func(preprocess.Stats), error](&analyzeFn{})
	register.Emitter1[preprocess.Stats]()
	register.Function2x1(mergeStats)
	register.DoFn1x2[preprocess.Stats, string, error](&fitFn{})
	register.DoFn3x1[string, func(*preprocess.Block) bool, func(work), error](&pairFn{})
	register.Iter1[preprocess.Block]()
	register.Emitter1[work]()
	register.DoFn2x2[context.Context, work, preprocess.ShardResult, error](&transformFn{})
	register.Combiner3[shardList, preprocess.ShardResult, shardList](&collectShardsFn{})
	register.DoFn2x2[shardList, string, preprocess.Manifest, error](&manifestFn{})
}

// Pipeline adds the preprocessing of r to scope s:
//
//	train blocks ─ Analyze ─ Fit ─► transform (side input)
//	train+eval blocks ─ Transform(transform) ─ Manifest(transform)
//
// Each element is a block of rows, not a line, so the runner's per-element
// overhead is paid once per block. The blocks are reshuffled before each
// stage that reads them, a fusion break after which a runner can spread
// a stage's blocks over bundles that run in parallel (prism splits a
// bundle whose element takes long), so every core works. The outputs are the files in r.OutDir
// (see preprocess.Request); Pipeline returns the manifest's PCollection
// (one element).
func Pipeline(s beam.Scope, r *preprocess.Request) (beam.PCollection, error) {
	train, eval, err := r.Blocks()
	if err != nil {
		return beam.PCollection{}, err
	}
	s = s.Scope("Preprocess")
	trainBlocks := beam.Reshuffle(s, beam.CreateList(s, train))
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

// Transform applies the Transform artifact (one string) to every row of
// blocks and writes each block's shard (and its rejected rows) into
// outDir, shuffled by seed and the block's index. It returns one
// preprocess.ShardResult per block. A block whose shard would take more
// than maxBytes (if positive) fails the pipeline with
// preprocess.ErrShardBytes before its shard is written.
//
// The artifact pairs with each block (blocks a side input of a stage
// that only pairs), and the pairs are reshuffled into the stage that
// writes the shards: that stage has no side input, so prism never polls
// it for a side input while its bundles run, and a runner can spread its
// blocks over parallel bundles. Each pair carries the artifact, a few KB
// (its vocabularies are at most preprocess.MaxVocab values a column).
func Transform(s beam.Scope, outDir string, seed uint64, maxBytes int64, blocks, transform beam.PCollection) beam.PCollection {
	s = s.Scope("Transform")
	pairs := beam.ParDo(s, &pairFn{}, transform, beam.SideInput{Input: blocks})
	return beam.ParDo(s, &transformFn{OutDir: outDir, Seed: seed, MaxBytes: maxBytes}, beam.Reshuffle(s, pairs))
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

// blockSlots bounds the blocks a worker process reads at once, one per
// CPU: analyzeFn and transformFn hold a block's bytes in memory while
// they work on it, and a runner may run more bundles than there are CPUs
// (prism splits a slow bundle until each holds one block, and runs up to
// 8 at once), which would add memory, not speed.
var blockSlots = make(chan struct{}, runtime.GOMAXPROCS(0))

// withBlockSlot runs fn once a block slot is free.
func withBlockSlot[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	select {
	case blockSlots <- struct{}{}:
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
	defer func() { <-blockSlots }()
	return fn()
}

// analyzeFn computes the statistics of one block.
type analyzeFn struct {
	Schema preprocess.Schema
}

func (f *analyzeFn) ProcessElement(ctx context.Context, b preprocess.Block, emit func(preprocess.Stats)) error {
	st, err := withBlockSlot(ctx, func() (*preprocess.Stats, error) { return f.Schema.AnalyzeBlock(b) })
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

// work is one block to transform with the Transform artifact to apply.
type work struct {
	Block    preprocess.Block
	Artifact string
}

// pairFn pairs the artifact with every block.
type pairFn struct{}

func (pairFn) ProcessElement(artifact string, blocks func(*preprocess.Block) bool, emit func(work)) error {
	var b preprocess.Block
	for blocks(&b) {
		emit(work{Block: b, Artifact: artifact})
	}
	return nil
}

// transformFn writes the shard of one block.
type transformFn struct {
	OutDir   string
	Seed     uint64
	MaxBytes int64

	// t is the parsed artifact of the last element, art its text: the
	// elements of a run all carry the same one.
	art string
	t   *preprocess.Transform
}

func (f *transformFn) ProcessElement(ctx context.Context, w work) (preprocess.ShardResult, error) {
	if f.t == nil || w.Artifact != f.art {
		t, err := preprocess.ParseTransform([]byte(w.Artifact))
		if err != nil {
			return preprocess.ShardResult{}, err
		}
		f.art, f.t = w.Artifact, t
	}
	return withBlockSlot(ctx, func() (preprocess.ShardResult, error) {
		return preprocess.TransformBlock(f.t, w.Block, f.OutDir, f.Seed, f.MaxBytes)
	})
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
