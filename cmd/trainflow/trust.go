package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/workflows"
)

// listFlag is a comma-separated list flag; repeating it adds to the list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*l = append(*l, e)
		}
	}
	return nil
}

// trustFlags are the operator's limits on what job specs may do, shared by
// worker and dev (see activities/trust.go).
type trustFlags struct {
	dataRoots, runners, envs listFlag
	beamArgs                 []string
	// readRoots, when set (readRootsSet), replaces DefaultReadRoots.
	readRoots    listFlag
	readRootsSet bool
}

// DefaultReadRoots is --read-roots' default: where Debian's dataset-*
// packages install public datasets (dataset-fashion-mnist among them).
var DefaultReadRoots = []string{"/usr/share/datasets"}

func (t *trustFlags) register(fs *flag.FlagSet) {
	fs.Var(&t.dataRoots, "data-roots", "directories and storage URIs (comma-separated) besides the job root (--jobs, else HOME/jobs) where jobs may read data and put job dirs, e.g. /srv/datasets,s3://bucket/data?region=eu-west-1; a URI root's query applies to every location under it")
	fs.Func("read-roots", "directories and storage URIs (comma-separated, repeatable) where jobs may read data (data.dir, data.train, data.eval) but never put a job dir; '' allows none (default "+strings.Join(DefaultReadRoots, ",")+": public datasets, e.g. the fashion_mnist preset's)", func(s string) error {
		t.readRootsSet = true
		return t.readRoots.Set(s)
	})
	fs.Var(&t.runners, "beam-runners", "Beam runners besides the in-process default that data.runner may name (comma-separated): universal, portable, flink, spark, dataflow (default none)")
	fs.Var(&t.envs, "beam-environments", "Beam environment types that run a command or container a job names, allowed in data.environment_type (comma-separated): DOCKER, PROCESS, EXTERNAL (default none; LOOPBACK is always allowed)")
	fs.Func("beam-arg", "a Beam pipeline option added after every job's own, e.g. --beam-arg=--worker_binary=/opt/trainflow-arm64 (repeatable)", func(s string) error {
		if !strings.HasPrefix(s, "-") {
			return errors.New("want a Beam option such as --worker_binary=PATH")
		}
		t.beamArgs = append(t.beamArgs, s)
		return nil
	})
}

// apply checks the flags and sets them on acts.
func (t *trustFlags) apply(acts *activities.Activities) error {
	known := []string{workflows.RunnerUniversal, workflows.RunnerPortable, workflows.RunnerFlink, workflows.RunnerSpark, workflows.RunnerDataflow}
	for i, r := range t.runners {
		t.runners[i] = strings.ToLower(r)
		if !slices.Contains(known, t.runners[i]) {
			return usageError{fmt.Errorf("--beam-runners: %q is not one of %s", r, strings.Join(known, ", "))}
		}
	}
	envs := []string{workflows.EnvDocker, workflows.EnvProcess, workflows.EnvExternal, workflows.EnvLoopback}
	for i, e := range t.envs {
		t.envs[i] = strings.ToUpper(e)
		if !slices.Contains(envs, t.envs[i]) {
			return usageError{fmt.Errorf("--beam-environments: %q is not one of %s", e, strings.Join(envs, ", "))}
		}
	}
	roots := make([]string, len(t.dataRoots))
	for i, r := range t.dataRoots {
		if !isURI(r) {
			abs, err := filepath.Abs(r)
			if err != nil {
				return usageError{fmt.Errorf("--data-roots: %w", err)}
			}
			roots[i] = abs
			continue
		}
		if _, err := url.Parse(r); err != nil {
			return usageError{fmt.Errorf("--data-roots: %w", err)}
		}
		roots[i] = r
	}
	read := DefaultReadRoots
	if t.readRootsSet {
		read = t.readRoots
	}
	readRoots, err := absRoots("--read-roots", read)
	if err != nil {
		return err
	}
	acts.ReadRoots = readRoots
	acts.DataRoots, acts.BeamRunners, acts.BeamEnvironments, acts.BeamArgs = roots, t.runners, t.envs, t.beamArgs
	return nil
}

// absRoots makes the local paths among roots absolute and checks the URIs.
func absRoots(flagName string, roots []string) ([]string, error) {
	out := make([]string, len(roots))
	for i, r := range roots {
		if !isURI(r) {
			abs, err := filepath.Abs(r)
			if err != nil {
				return nil, usageError{fmt.Errorf("%s: %w", flagName, err)}
			}
			out[i] = abs
			continue
		}
		if _, err := url.Parse(r); err != nil {
			return nil, usageError{fmt.Errorf("%s: %w", flagName, err)}
		}
		out[i] = r
	}
	return out, nil
}
