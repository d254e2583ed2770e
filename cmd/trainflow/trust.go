package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/trainflow/trainflow/worker"
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
// worker and dev (see worker.Limits and activities/trust.go).
type trustFlags struct {
	dataRoots, runners, envs listFlag
	beamArgs                 []string
	// readRoots, when set (readRootsSet), replaces worker.DefaultReadRoots.
	readRoots    listFlag
	readRootsSet bool
}

func (t *trustFlags) register(fs *flag.FlagSet) {
	fs.Var(&t.dataRoots, "data-roots", "directories and storage URIs (comma-separated) besides the job root (--jobs, else HOME/jobs) where jobs may read data and put job dirs, e.g. /srv/datasets,s3://bucket/data?region=eu-west-1; a URI root's query applies to every location under it")
	fs.Func("read-roots", "directories and storage URIs (comma-separated, repeatable) where jobs may read data (data.dir, data.train, data.eval) but never put a job dir; '' allows none (default "+strings.Join(worker.DefaultReadRoots, ",")+": public datasets, e.g. the fashion_mnist preset's)", func(s string) error {
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

// limits are the flags as the worker's Limits.
func (t *trustFlags) limits() worker.Limits {
	l := worker.Limits{DataRoots: t.dataRoots, BeamRunners: t.runners, BeamEnvironments: t.envs, BeamArgs: t.beamArgs}
	if t.readRootsSet {
		// --read-roots '' allows none: an empty list, not nil (the default).
		l.ReadRoots = append([]string{}, t.readRoots...)
	}
	return l
}
