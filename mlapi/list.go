package mlapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
)

// Page sizes of projects.jobs.list, as Cloud ML Engine's.
const (
	defaultPageSize = 20
	maxPageSize     = 100
)

// listResponse is ListJobsResponse.
type listResponse struct {
	Jobs          []*Job `json:"jobs,omitempty"`
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// filter is a parsed jobs.list filter: terms joined by AND, each
// state=S, jobId=ID (jobId:PREFIX* for a prefix) or labels.KEY=VALUE.
type filter struct {
	state       string
	jobID       string
	jobIDPrefix bool
	labels      map[string]string
}

// parseFilter parses a filter: "" matches every job; terms are joined
// by AND (as the reference's examples: `state=RUNNING AND
// labels.team=ml`), each KEY=VALUE or KEY:VALUE, a value optionally in
// double quotes. Its errors name the term at fault.
func parseFilter(s string) (filter, error) {
	f := filter{labels: map[string]string{}}
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	if len(s) > 1024 {
		return f, invalid("filter: %d bytes, at most 1024", len(s))
	}
	for _, term := range strings.Split(s, " AND ") {
		term = strings.TrimSpace(term)
		i := strings.IndexAny(term, "=:")
		if i <= 0 || i == len(term)-1 {
			return f, invalid("filter: term %q: want KEY=VALUE joined by AND, KEY state, jobId or labels.KEY", clip(term))
		}
		k, op, v := strings.TrimSpace(term[:i]), term[i], strings.TrimSpace(term[i+1:])
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		switch {
		case k == "state":
			if !slices.Contains(states, v) {
				return f, invalid("filter: state %q: want one of %s", clip(v), strings.Join(states, ", "))
			}
			if f.state != "" && f.state != v {
				return f, invalid("filter: state given twice (%s, %s): no job matches both", f.state, v)
			}
			f.state = v
		case k == "jobId":
			prefix := op == ':' && strings.HasSuffix(v, "*")
			if prefix {
				v = strings.TrimSuffix(v, "*")
			}
			if err := ident.Check(v); err != nil {
				return f, invalid("filter: jobId %q: %v", clip(v), err)
			}
			f.jobID, f.jobIDPrefix = v, prefix
		case strings.HasPrefix(k, "labels."):
			lk := strings.TrimPrefix(k, "labels.")
			if jobspec.CheckLabels(map[string]string{lk: v}) != nil {
				return f, invalid("filter: %s=%q: a label key and value are lowercase letters, digits, '_' and '-'", clip(k), clip(v))
			}
			f.labels[lk] = v
		default:
			return f, invalid("filter: key %q: want state, jobId or labels.KEY", clip(k))
		}
	}
	return f, nil
}

// match reports whether job j (of the list's rows) passes f.
func (f filter) match(j *Job) bool {
	if f.state != "" && j.State != f.state {
		return false
	}
	if f.jobID != "" && !(j.JobID == f.jobID || f.jobIDPrefix && strings.HasPrefix(j.JobID, f.jobID)) {
		return false
	}
	for k, v := range f.labels {
		if got, ok := j.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// pageToken is where the next page starts: after the job JobID created
// at Create (nanoseconds), in a listing under the filter whose digest is
// Filter. Tokens are opaque to clients (base64url of its JSON) and
// checked when they come back: one that does not decode, names no valid
// job ID or was issued for another filter is a 400.
type pageToken struct {
	Create int64  `json:"c"`
	JobID  string `json:"j"`
	Filter string `json:"f"`
}

// filterDigest binds a token to its filter.
func filterDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

func (t pageToken) String() string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parsePageToken checks a token a client sent back under filter fs.
func parsePageToken(s, fs string) (*pageToken, error) {
	if s == "" {
		return nil, nil
	}
	bad := invalid("pageToken: not a token this server issued for this filter; start again without pageToken")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 512 {
		return nil, bad
	}
	var t pageToken
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&t) != nil || dec.More() || !ident.Valid(t.JobID) || t.Create <= 0 || t.Filter != filterDigest(fs) {
		return nil, bad
	}
	return &t, nil
}

// newer orders jobs newest first, then by job ID.
func newer(ac int64, aid string, bc int64, bid string) int {
	return cmp.Or(cmp.Compare(bc, ac), strings.Compare(aid, bid))
}

// list is projects.jobs.list.
func (a *API) list(c echo.Context) error {
	if _, err := a.project(c); err != nil {
		return err
	}
	if err := checkQuery(c, "filter", "pageSize", "pageToken"); err != nil {
		return err
	}
	size, err := pageSize(c, defaultPageSize, maxPageSize)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	fs := q.Get("filter")
	f, err := parseFilter(fs)
	if err != nil {
		return err
	}
	after, err := parsePageToken(q.Get("pageToken"), fs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	rows, err := jobs.MLRows(ctx, a.opts.Client, a.opts.Namespace, f.jobID, f.jobIDPrefix)
	if err != nil {
		return err
	}
	slices.SortStableFunc(rows, func(x, y jobs.MLRow) int {
		return newer(x.Start.UnixNano(), x.JobID, y.Start.UnixNano(), y.JobID)
	})
	out := listResponse{Jobs: []*Job{}}
	for _, r := range rows {
		if after != nil && newer(r.Start.UnixNano(), r.JobID, after.Create, after.JobID) <= 0 {
			continue
		}
		j := rowJob(r)
		if !f.match(j) {
			continue
		}
		if len(out.Jobs) == size {
			last := out.Jobs[size-1]
			t, _ := time.Parse(time.RFC3339Nano, last.CreateTime)
			out.NextPageToken = pageToken{Create: t.UnixNano(), JobID: last.JobID, Filter: filterDigest(fs)}.String()
			break
		}
		out.Jobs = append(out.Jobs, j)
	}
	return c.JSON(http.StatusOK, out)
}

// rowJob is the Job of a listed row: its state, times, labels and input
// (what visibility holds); its outputs are jobs.get's.
func rowJob(r jobs.MLRow) *Job {
	j := &Job{JobID: r.JobID, State: stateOf(r.Status, r.Phase, false), CreateTime: rfc3339(r.Start), StartTime: rfc3339(r.Start),
		Labels: r.Meta.Labels, TrainingInput: r.Meta.TrainingInput, PredictionInput: r.Meta.PredictionInput}
	if r.End != nil {
		j.EndTime = rfc3339(*r.End)
	}
	j.Etag = jobEtag(r.RunID, j.Labels)
	return j
}
