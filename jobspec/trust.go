package jobspec

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// A job spec is untrusted: anyone who can start a workflow writes one. The
// rules a spec alone can be checked against live here (ValidateTrust, run
// by the workflow and again by the worker's activities); the rules that
// need the operator's configuration (which runners, environments and
// directories the worker allows) are the activities' (see
// activities.Activities.DataRoots).

// TuningFlags are the Beam pipeline options data.beam_args may set with
// any runner: tuning that runs no code of the spec's choosing and reaches
// no host or file the spec names.
var TuningFlags = []string{"parallelism", "element_processing_timeout", "beam_strict"}

// DataflowFlags are the further options data.beam_args may set with
// data.runner "dataflow" (which the worker's operator must enable): the
// project, placement and size of the Dataflow job.
var DataflowFlags = []string{
	"project", "region", "zone", "worker_region", "worker_zone", "staging_location", "temp_location",
	"num_workers", "max_num_workers", "worker_machine_type", "machine_type", "disk_size_gb",
	"autoscaling_algorithm", "number_of_worker_harness_threads", "labels", "network", "subnetwork",
	"no_use_public_ips", "use_public_ips",
}

// BeamArgAllowed reports whether data.beam_args may set the Beam option
// name with the given runner.
func BeamArgAllowed(name, runner string) bool {
	return slices.Contains(TuningFlags, name) || runner == RunnerDataflow && slices.Contains(DataflowFlags, name)
}

// URISchemes are the storage schemes a job spec may name (inside the
// worker's roots; see activities.Activities.DataRoots).
var URISchemes = []string{"file", "s3", "gs", "azblob", "mem"}

// ValidateTrust reports the first part of a defaulted spec that reaches
// beyond what a job spec may choose, naming the field:
//
//   - data.beam_args entries other than --name=value (or --name) of a
//     TuningFlags option (or a DataflowFlags one with runner dataflow):
//     runner, endpoint, environment and worker binary come from the
//     typed fields and the worker's operator only;
//   - job_dir, data.dir, data.train and data.eval with a ".." segment,
//     a scheme not in URISchemes, or a URI carrying a query, user
//     information or a fragment: query parameters (endpoint, anonymous,
//     region, profile…) come from the worker's roots only.
func (s *JobSpec) ValidateTrust() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s %s", ErrInvalid, field, fmt.Sprintf(format, a...))
	}
	for i, arg := range s.Data.BeamArgs {
		field := fmt.Sprintf("data.beam_args[%d]", i)
		name := flagName(arg)
		switch {
		case name == "" || name == "-" || strings.HasPrefix(name, "-"):
			return bad(field, "%q: want --name=value", clip(arg))
		case typedField(name) != "":
			return bad(field, "sets --%s: set %s instead (the worker's operator decides which runners and environments are allowed)", name, typedField(name))
		case name == "worker_binary":
			return bad(field, "sets --worker_binary: the worker binary is the worker's operator's choice (worker --beam-arg)")
		case !BeamArgAllowed(name, s.Data.Runner):
			allowed := TuningFlags
			if s.Data.Runner == RunnerDataflow {
				allowed = append(slices.Clone(TuningFlags), DataflowFlags...)
			}
			return bad(field, "sets --%s, which a job spec may not set: beam_args takes only %s", name, strings.Join(allowed, ", "))
		}
	}
	if s.JobDir != "" {
		if err := checkLocation("job_dir", s.JobDir); err != nil {
			return err
		}
	}
	if s.SharedData != nil {
		if err := checkLocation("shared_data.job_dir", s.SharedData.JobDir); err != nil {
			return err
		}
	}
	if s.Data.Dir != "" {
		if err := checkLocation("data.dir", s.Data.Dir); err != nil {
			return err
		}
	}
	for _, split := range []struct {
		name  string
		files []string
	}{{"data.train", s.Data.Train}, {"data.eval", s.Data.Eval}} {
		for i, f := range split.files {
			if err := checkLocation(fmt.Sprintf("%s[%d]", split.name, i), f); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLocation checks a path or storage URI of a spec: no ".." segment;
// URIs of a known scheme, without query, user information or fragment.
func checkLocation(field, loc string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s %q: %s", ErrInvalid, field, clip(loc), fmt.Sprintf(format, a...))
	}
	if strings.ContainsFunc(loc, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return bad("control character")
	}
	p := loc
	if strings.Contains(loc, "://") {
		u, err := url.Parse(loc)
		switch {
		case err != nil:
			return bad("not a URI: %v", err)
		case !slices.Contains(URISchemes, strings.ToLower(u.Scheme)):
			return bad("scheme %q: want a path or one of %s", u.Scheme, strings.Join(URISchemes, ", "))
		case u.RawQuery != "" || u.ForceQuery:
			return bad("query parameters (endpoint, region, anonymous, credentials…) come from the worker's --jobs and --data-roots, not from a job spec: drop \"?%s\"", clip(u.RawQuery))
		case u.User != nil:
			return bad("user information in a URI: credentials come from the worker's environment")
		case u.Fragment != "" || strings.Contains(loc, "#"):
			return bad("fragment in a URI")
		}
		if hasDotDot(u.Path) {
			return bad("'..' is not allowed in a job spec's paths")
		}
		p = u.Host + u.Path
	}
	if hasDotDot(filepath.ToSlash(p)) {
		return bad("'..' is not allowed in a job spec's paths")
	}
	return nil
}

// typedField returns the RunnerSpec field (as data.<key>) that sets the Beam flag name
// ("data.runner" for "runner"), or "".
func typedField(name string) string {
	for _, f := range (RunnerSpec{}).typedFlags() {
		if f.flag == name {
			return f.field
		}
	}
	return ""
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// clip shortens a spec value quoted in an error.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
