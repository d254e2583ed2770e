package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/trainflow/trainflow/internal/storage"
)

// BlessingFile is a version's blessing record, <model>/<version>/blessing.json:
// the result of the checks that compared the version (the candidate) with
// the model's default version (the baseline) before it was published, or
// later (`trainflow models bless`). It is written by one atomic write
// into the version's directory, once the version exists, and replaced by a
// later blessing of the same version. A bundle's own files (metadata.json
// lists them) never include it, so it does not change the version's ID.
const BlessingFile = "blessing.json"

// BlessingFormat is the format version of blessing.json this build writes
// and reads.
const BlessingFormat = 1

// Blessing is the content of blessing.json: whether the candidate was
// blessed, why (Reasons: every failed check, in order; empty when
// blessed), and every number the checks looked at.
type Blessing struct {
	FormatVersion int `json:"format_version"`
	// Model and Version name the blessed version (Version is 0 in a
	// blessing made before its version was published).
	Model   string `json:"model"`
	Version int64  `json:"version,omitempty"`
	// Candidate is the bundle evaluated (a directory or storage URI) and
	// CandidateID its ID (Bundle.ID).
	Candidate   string `json:"candidate"`
	CandidateID string `json:"candidate_id"`
	// Baseline is the version that was the model's default when the
	// blessing ran, and BaselineID its ID; 0 and "" with NoBaseline (the
	// model had no version yet).
	Baseline   int64    `json:"baseline,omitempty"`
	BaselineID string   `json:"baseline_id,omitempty"`
	NoBaseline bool     `json:"no_baseline,omitempty"`
	Blessed    bool     `json:"blessed"`
	Reasons    []string `json:"reasons,omitempty"`
	// JobID is the job (or "cli") that ran the blessing; Time when it
	// finished, RFC 3339 UTC.
	JobID string `json:"job_id,omitempty"`
	Time  string `json:"time"`
	// EvalData lists the evaluation files; EvalRows the rows both models
	// were evaluated on, BadRows the rows skipped (unparsable, unknown
	// label).
	EvalData []string `json:"eval_data"`
	EvalRows int64    `json:"eval_rows"`
	BadRows  int64    `json:"bad_rows,omitempty"`
	// Metrics has every metric that applies to the model, overall, with
	// the thresholds on it.
	Metrics []MetricCheck `json:"metrics"`
	// SliceMetric is the metric of Slices; MaxSliceRegression its bound
	// (absent: slices are reported, not judged).
	SliceMetric        string   `json:"slice_metric,omitempty"`
	MaxSliceRegression *float64 `json:"max_slice_regression,omitempty"`
	// Slices has one entry per value of each slice column, by column then
	// value; WorstSlice is the judged slice value with the largest
	// regression (nil when none was judged).
	Slices     []SliceCheck `json:"slices,omitempty"`
	WorstSlice *SliceCheck  `json:"worst_slice,omitempty"`
	// Infra is the infra check's result, nil when none was asked for.
	Infra *InfraCheck `json:"infra,omitempty"`
}

// MetricCheck is one overall metric of a blessing. Regression is how much
// worse the candidate is than the baseline by the metric's goal (positive
// = worse; baseline − candidate for a metric to maximize, candidate −
// baseline for one to minimize). Min, Max and MaxRegression are the
// thresholds on it (absent: none); Pass is false when one failed.
type MetricCheck struct {
	Metric        string   `json:"metric"`
	Goal          string   `json:"goal"`
	Candidate     float64  `json:"candidate"`
	Baseline      *float64 `json:"baseline,omitempty"`
	Delta         *float64 `json:"delta,omitempty"` // candidate − baseline
	Regression    *float64 `json:"regression,omitempty"`
	Min           *float64 `json:"min,omitempty"`
	Max           *float64 `json:"max,omitempty"`
	MaxRegression *float64 `json:"max_regression,omitempty"`
	Pass          bool     `json:"pass"`
}

// SliceCheck is the slice metric on the rows whose column holds value.
// Judged is false when the slice had too few rows (or no baseline);
// Pass is false when its regression exceeded the bound.
type SliceCheck struct {
	Column           string   `json:"column"`
	Value            string   `json:"value"`
	Examples         int64    `json:"examples"`
	Candidate        float64  `json:"candidate"`
	Baseline         *float64 `json:"baseline,omitempty"`
	BaselineExamples int64    `json:"baseline_examples,omitempty"`
	Regression       *float64 `json:"regression,omitempty"`
	Judged           bool     `json:"judged"`
	Pass             bool     `json:"pass"`
}

// InfraCheck is the infra check: the candidate loaded in a throwaway
// prediction server, sent Requests requests of the signature's example
// rows over HTTP. Pass when every answer was a 200 within MaxLatencyMS.
type InfraCheck struct {
	MaxLatencyMS int     `json:"max_latency_ms"`
	Requests     int     `json:"requests"`
	OK           int     `json:"ok"`
	LatencyMS    float64 `json:"latency_ms"` // the slowest answer
	Error        string  `json:"error,omitempty"`
	Pass         bool    `json:"pass"`
}

// ParseBlessing decodes a blessing.json; an unknown format version or a
// record that does not decode is an error wrapping ErrBundle.
func ParseBlessing(b []byte) (*Blessing, error) {
	var bl Blessing
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&bl); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBundle, BlessingFile, err)
	}
	if bl.FormatVersion != BlessingFormat {
		return nil, fmt.Errorf("%w: %s: format version %d, this build reads %d", ErrBundle, BlessingFile, bl.FormatVersion, BlessingFormat)
	}
	return &bl, nil
}

// Marshal encodes b as blessing.json (indented), with its format version.
func (b *Blessing) Marshal() ([]byte, error) {
	c := *b
	c.FormatVersion = BlessingFormat
	return json.MarshalIndent(c, "", "  ")
}

// Blessings reads and writes versions' blessing records. Store
// implements it.
type Blessings interface {
	// Blessing returns the blessing of a version; a version without one
	// is an error wrapping ErrNotFound.
	Blessing(ctx context.Context, model string, version int64) (*Blessing, error)
	// WriteBlessing stores b as the blessing of an existing version
	// (b.Model and b.Version are set to it), replacing any earlier one.
	WriteBlessing(ctx context.Context, model string, version int64, b *Blessing) error
}

var _ Blessings = (*Store)(nil)

// Blessing returns the blessing of a version (see Blessings).
func (r *Store) Blessing(ctx context.Context, model string, version int64) (*Blessing, error) {
	if !ValidName(model) {
		return nil, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	raw, err := r.read(ctx, versionKey(model, version)+"/"+BlessingFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s version %d has no blessing", ErrNotFound, model, version)
	}
	if err != nil {
		return nil, fmt.Errorf("blessing of %s/%d: %w", model, version, err)
	}
	return ParseBlessing(raw)
}

// WriteBlessing writes b as the blessing of an existing version, in one
// atomic write (see Blessings).
func (r *Store) WriteBlessing(ctx context.Context, model string, version int64, b *Blessing) error {
	id, err := r.VersionID(ctx, model, version)
	if err != nil {
		return fmt.Errorf("write blessing: %w", err)
	}
	if id == "" {
		return fmt.Errorf("write blessing: %w: %s has no version %d", ErrNotFound, model, version)
	}
	c := *b
	c.Model, c.Version = model, version
	raw, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("write blessing: %w", err)
	}
	if err := r.st.Write(ctx, versionKey(model, version)+"/"+BlessingFile, raw); err != nil {
		return fmt.Errorf("write blessing of %s/%d: %w", model, version, err)
	}
	return nil
}

// A candidate's blessing is the record the Bless step made of a bundle
// before it was published: BlessingFile in the bundle's own directory
// (export/<exporter>/<step>/blessing.json of the job directory), beside
// the bundle's files and not one of them (metadata.json does not list it,
// so it changes neither the bundle's ID nor what Publish copies; Delete
// removes it with the bundle). Only the Bless activity writes it, after
// its checks ran; Publish reads it from there — never from the workflow,
// whose copy of the verdict is an activity result any Temporal client can
// complete — and stores it with the published version.

// maxBlessingBytes bounds a blessing record as ReadCandidateBlessing reads
// it: a record is a few KB (one entry per metric and slice value).
const maxBlessingBytes = 4 << 20

// WriteCandidateBlessing stores b as the blessing of the candidate bundle
// in st (a store opened at the bundle), in one atomic write that replaces
// an earlier one (a retried Bless writes it again).
func WriteCandidateBlessing(ctx context.Context, st *storage.Store, b *Blessing) error {
	raw, err := b.Marshal()
	if err != nil {
		return fmt.Errorf("write candidate blessing: %w", err)
	}
	if err := st.Write(ctx, BlessingFile, raw); err != nil {
		return fmt.Errorf("write candidate blessing: %w", err)
	}
	return nil
}

// ReadCandidateBlessing reads the blessing the Bless step stored with the
// candidate bundle in st (a store opened at the bundle). A bundle without
// one is an error wrapping ErrNotFound; a record that does not decode, or
// is larger than any record, one wrapping ErrBundle. The caller checks
// that it judges the bundle it publishes (CheckCandidate).
func ReadCandidateBlessing(ctx context.Context, st *storage.Store) (*Blessing, error) {
	r, err := st.NewReader(ctx, BlessingFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s", ErrNotFound, st.URI(), BlessingFile)
	}
	if err != nil {
		return nil, fmt.Errorf("read candidate blessing: %w", err)
	}
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, maxBlessingBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read candidate blessing: %w", err)
	}
	if len(raw) > maxBlessingBytes {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrBundle, BlessingFile, maxBlessingBytes)
	}
	return ParseBlessing(raw)
}

// CheckCandidate reports whether b is a blessing of the bundle c as a
// version of model: it names c's ID (its content: the same bytes judged)
// and model. A record of another bundle or model is an error that names
// both; the verdict (b.Blessed) is the caller's to weigh.
func (b *Blessing) CheckCandidate(c *Bundle, model string) error {
	switch {
	case b.CandidateID != c.ID():
		return fmt.Errorf("the blessing judged bundle %q, not %s (%s)", b.CandidateID, c.Dir, c.ID())
	case b.Model != model:
		return fmt.Errorf("the blessing of %s judged it as a version of model %q, not %q", c.Dir, b.Model, model)
	}
	return nil
}
