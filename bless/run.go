package bless

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
)

// Request is one blessing: a candidate bundle of Model judged against a
// baseline version in Repo by Spec on the rows of EvalData.
type Request struct {
	Model     string
	Candidate *bundle.Bundle
	Repo      bundle.Repository
	// Baseline is the version to compare with; 0 means the model's
	// default when Run starts (none if the model has no version yet).
	Baseline int64
	// EvalData lists the evaluation files: local paths or storage URIs
	// (downloaded into a temporary directory first).
	EvalData []string
	// Spec is the bless section, defaulted (BlessSpec.WithDefaults).
	Spec jobspec.BlessSpec
	// Types builds the bundles' models (nil: the built-in types).
	Types *train.Registry
	// Log receives the infra check's server's log.
	Log *slog.Logger
}

// Run evaluates the candidate and the baseline on the same rows, judges
// them (Judge), runs the infra check if the spec asks (Infra), and
// returns the complete record, identified (model, bundles, versions,
// files, time) but not yet stored. Errors that are the request's fault
// (thresholds that do not fit the model, a slice column of too many
// values, unreadable evaluation rows) wrap ErrSpec, ErrSlice or
// preprocess.ErrRequest.
func Run(ctx context.Context, r Request) (*bundle.Blessing, error) {
	var base *bundle.Bundle
	baseVersion := r.Baseline
	if baseVersion == 0 {
		vs, err := r.Repo.Versions(ctx, r.Model)
		if err != nil {
			return nil, fmt.Errorf("bless: baseline: %w", err)
		}
		if len(vs) > 0 {
			if baseVersion, err = r.Repo.Default(ctx, r.Model); err != nil {
				return nil, fmt.Errorf("bless: baseline: %w", err)
			}
		}
	}
	if baseVersion != 0 {
		var err error
		if base, err = r.Repo.Read(ctx, r.Model, baseVersion, r.Types); err != nil {
			return nil, fmt.Errorf("bless: baseline %s version %d: %w", r.Model, baseVersion, err)
		}
	}
	files, cleanup, err := stage(ctx, r.EvalData)
	defer cleanup()
	if err != nil {
		return nil, err
	}
	cand, err := Evaluate(r.Candidate, files, r.Spec.Slices)
	if err != nil {
		return nil, fmt.Errorf("bless: evaluate the candidate: %w", err)
	}
	var baseEval *Eval
	if base != nil {
		if baseEval, err = Evaluate(base, files, r.Spec.Slices); err != nil {
			return nil, fmt.Errorf("bless: evaluate the baseline %s version %d: %w", r.Model, baseVersion, err)
		}
	}
	bl, err := Judge(r.Spec, cand, baseEval)
	if err != nil {
		return nil, err
	}
	bl.Model, bl.Candidate, bl.CandidateID, bl.EvalData = r.Model, r.Candidate.Dir, r.Candidate.ID(), r.EvalData
	if base != nil {
		bl.Baseline, bl.BaselineID = baseVersion, base.ID()
	}
	if in := r.Spec.Infra; in != nil {
		log := r.Log
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		AddInfra(bl, Infra(ctx, r.Candidate, r.Types, cand.Examples, time.Duration(in.MaxLatencyMS)*time.Millisecond, log))
	}
	bl.Time = time.Now().UTC().Format(time.RFC3339)
	return bl, nil
}

// stage returns local paths for files (plain paths as they are, storage
// URIs downloaded into a temporary directory that cleanup removes). A
// missing file is an error wrapping preprocess.ErrRequest.
func stage(ctx context.Context, files []string) (local []string, cleanup func(), err error) {
	cleanup = func() {}
	if len(files) == 0 {
		return nil, cleanup, fmt.Errorf("%w: no evaluation data", errRequest)
	}
	var tmp string
	for i, f := range files {
		if !storage.IsURI(f) {
			local = append(local, f)
			continue
		}
		if tmp == "" {
			if tmp, err = os.MkdirTemp("", "trainflow-bless-"); err != nil {
				return nil, cleanup, err
			}
			cleanup = func() { os.RemoveAll(tmp) }
		}
		st, key, err := jobdir.OpenObject(ctx, f)
		if err != nil {
			return nil, cleanup, fmt.Errorf("%w: eval data %s: %w", errRequest, f, err)
		}
		dst := filepath.Join(tmp, strconv.Itoa(i), key)
		err = jobdir.Download(ctx, st, key, dst)
		st.Close()
		if errors.Is(err, storage.ErrNotExist) {
			return nil, cleanup, fmt.Errorf("%w: eval data %s: %w", errRequest, f, err)
		}
		if err != nil {
			return nil, cleanup, err
		}
		local = append(local, dst)
	}
	return local, cleanup, nil
}
