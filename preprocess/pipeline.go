package preprocess

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"
)

func init() {
	beam.RegisterType(reflect.TypeOf(Block{}))
	beam.RegisterCoder(reflect.TypeOf(Stats{}), encodeStats, decodeStats)
	beam.RegisterCoder(reflect.TypeOf(shardList{}), encodeShards, decodeShards)
	register.DoFn2x1[Block, func(Stats), error](&analyzeFn{})
	register.Emitter1[Stats]()
	register.Function2x1(mergeStats)
	register.DoFn1x2[Stats, string, error](&fitFn{})
	register.DoFn2x2[Block, string, shardList, error](&transformFn{})
	register.Function2x1(mergeShards)
	register.DoFn2x1[shardList, string, error](&manifestFn{})
}

// Pipeline adds the preprocessing of r to scope s:
//
//	train blocks ─ analyzeFn ─ Combine(mergeStats) ─ fitFn ─► transform (side input)
//	train+eval blocks ─ transformFn(transform) ─ Combine(mergeShards) ─ manifestFn
//
// Each element is a block of rows, not a line, so the runner's per-element
// overhead is paid once per block.
func Pipeline(s beam.Scope, r *Request) error {
	train, eval, err := r.blocks()
	if err != nil {
		return err
	}
	s = s.Scope("Preprocess")
	trainBlocks := beam.CreateList(s, train)
	allBlocks := beam.CreateList(s, append(append([]Block{}, train...), eval...))

	partial := beam.ParDo(s.Scope("Analyze"), &analyzeFn{Schema: r.Schema}, trainBlocks)
	stats := beam.Combine(s.Scope("MergeStats"), mergeStats, partial)
	transform := beam.ParDo(s.Scope("Fit"), &fitFn{Request: *r}, stats)

	shards := beam.ParDo(s.Scope("Transform"), &transformFn{OutDir: r.OutDir, Seed: r.Seed},
		allBlocks, beam.SideInput{Input: transform})
	all := beam.Combine(s.Scope("CollectShards"), mergeShards, shards)
	beam.ParDo0(s.Scope("Manifest"), &manifestFn{Request: *r}, all, beam.SideInput{Input: transform})
	return nil
}

// RunBeam runs the pipeline of r on the runner named by Beam's --runner flag
// (prism, in-process, by default) and returns the manifest it wrote. ctx must
// not carry a deadline: prism panics on one.
func RunBeam(ctx context.Context, r *Request) (*Manifest, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	p, s := beam.NewPipelineWithRoot()
	if err := Pipeline(s, r); err != nil {
		return nil, err
	}
	if err := beamx.Run(ctx, p); err != nil {
		return nil, fmt.Errorf("run pipeline: %w", err)
	}
	return ReadManifest(r.OutDir)
}

type analyzeFn struct {
	Schema Schema
}

func (f *analyzeFn) ProcessElement(b Block, emit func(Stats)) error {
	st, err := f.Schema.AnalyzeBlock(b)
	if err != nil {
		return err
	}
	emit(*st)
	return nil
}

func mergeStats(a, b Stats) Stats {
	a.Merge(&b)
	return a
}

type fitFn struct {
	Request Request
}

func (f *fitFn) ProcessElement(st Stats) (string, error) {
	_, b, err := f.Request.fit(&st)
	return string(b), err
}

type transformFn struct {
	OutDir string
	Seed   uint64

	t *Transform
}

func (f *transformFn) ProcessElement(b Block, artifact string) (shardList, error) {
	if f.t == nil {
		t, err := ParseTransform([]byte(artifact))
		if err != nil {
			return shardList{}, err
		}
		f.t = t
	}
	res, err := TransformBlock(f.t, b, f.OutDir, f.Seed)
	return shardList{Items: []ShardResult{res}}, err
}

// shardList is a mergeable list of shard results.
type shardList struct {
	Items []ShardResult
}

func mergeShards(a, b shardList) shardList {
	a.Items = append(a.Items, b.Items...)
	return a
}

type manifestFn struct {
	Request Request
}

func (f *manifestFn) ProcessElement(all shardList, artifact string) error {
	t, err := ParseTransform([]byte(artifact))
	if err != nil {
		return err
	}
	_, err = f.Request.finish(t, all.Items)
	return err
}

func encodeStats(s Stats) ([]byte, error) { return json.Marshal(s) }

func decodeStats(b []byte) (Stats, error) {
	var s Stats
	err := json.Unmarshal(b, &s)
	return s, err
}

func encodeShards(s shardList) ([]byte, error) { return json.Marshal(s) }

func decodeShards(b []byte) (shardList, error) {
	var s shardList
	err := json.Unmarshal(b, &s)
	return s, err
}
