package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/workflows"
)

// rolloutBody is a model's rollout (workflows.RolloutJob under
// workflows.RolloutWorkflowID) as the console shows it: live from its
// status query while it runs, from its result once it ended. Its words
// are jobs.DescribeRollout's, the same as `models rollout-status`.
type rolloutBody struct {
	Model, ID, Status string
	Running           bool
	Start, End        string
	// St is the status query's answer or the result; nil when neither
	// could be read (Error says why).
	St    *workflows.RolloutStatus
	Error string
	// Outcome is St in words: the summary, the workflow's own status
	// explained, every step with its verdict (or why it has none), the
	// last gates.
	Outcome jobs.RolloutOutcome
	// Hold is the time left before the current window is judged.
	Hold string
	// Gates are the last verdict's values, one row per gate.
	Gates []gateRow
}

type gateRow struct {
	Name, Value string
}

// rolloutOf reads model's rollout; nil when it never had one (or the
// console has no Temporal client).
func (c *Console) rolloutOf(ctx context.Context, model string, now time.Time) (*rolloutBody, error) {
	cl := c.opts.Client
	if cl == nil {
		return nil, nil
	}
	id := workflows.RolloutWorkflowID(model)
	d, err := cl.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("cannot read the rollout from Temporal: %s", temporalError(err))
	}
	info := d.WorkflowExecutionInfo
	b := &rolloutBody{Model: model, ID: id, Status: statusName(info.Status), Running: info.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
	if info.StartTime != nil {
		b.Start = info.StartTime.AsTime().UTC().Format(time.RFC3339)
	}
	if info.CloseTime != nil {
		b.End = info.CloseTime.AsTime().UTC().Format(time.RFC3339)
	}
	qctx, cancel := ctx, context.CancelFunc(func() {})
	if b.Running { // a query waits for a worker: not longer than this
		qctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	}
	st, err := jobs.RolloutStatusOf(qctx, cl, id, "", b.Running)
	cancel()
	switch {
	case err != nil && b.Running:
		b.Error = "status query: " + temporalError(err)
		return b, nil
	case err != nil:
		b.Error = err.Error()
		return b, nil
	}
	b.St = &st
	firstRun := info.GetFirstRunId()
	if firstRun == "" {
		firstRun = info.GetExecution().GetRunId()
	}
	b.fill(now, c.rolledBackBy(ctx, st, id, firstRun))
	return b, nil
}

// rolledBackBy is who rolled rollout id (run chain firstRun) back, as the
// model's history records its rollback ("" when unknown: no repository,
// no such record, or a record nobody verified).
func (c *Console) rolledBackBy(ctx context.Context, st workflows.RolloutStatus, id, firstRun string) string {
	r := c.opts.Repository
	if r == nil || st.State != workflows.RolloutRolledBack {
		return ""
	}
	h, err := r.History(ctx, st.Model)
	if err != nil {
		return ""
	}
	for _, ch := range slices.Backward(h) {
		cs := ch.Cause
		if cs.JobID == id && cs.Step == "rollback" && (cs.Run == "" || cs.Run == firstRun) {
			if !cs.Verified {
				return ""
			}
			return cs.By
		}
	}
	return ""
}

// fill words b.St (jobs.DescribeRollout; abortedBy who rolled it back)
// and derives the hold left and the gate rows.
func (b *rolloutBody) fill(now time.Time, abortedBy string) {
	st := b.St
	b.Outcome = jobs.DescribeRollout(*st, b.Status, abortedBy)
	if b.Running && !st.WaitUntil.IsZero() {
		b.Hold = max(0, st.WaitUntil.Sub(now)).Round(time.Second).String()
	}
	if st.Last != nil {
		v := st.Last.Values
		f := func(x float64) string {
			if x < 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.4g", x)
		}
		b.Gates = []gateRow{
			{"candidate requests", fmt.Sprint(v.Requests)}, {"baseline requests", fmt.Sprint(v.BaselineRequests)},
			{"error rate", f(v.ErrorRate)}, {"p99 ms", f(v.P99Ms)}, {"class shift", f(v.ClassShift)},
			{"mean shift", f(v.MeanShift)}, {"quantile shift", f(v.QuantileShift)},
			{"accuracy", fmt.Sprintf("%.4g (%d labelled)", v.Accuracy, v.Labelled)},
			{"agreement", fmt.Sprintf("%.4g (%d compared)", v.Agreement, v.Compared)},
		}
	}
}

// rolloutPage shows a model's rollout, reloading every 5 s while it runs.
func (c *Console) rolloutPage(ec echo.Context) error {
	name := ec.Param("name")
	if err := ident.Check(name); err != nil {
		return c.fail(ec, http.StatusBadRequest, "models", fmt.Sprintf("model name: %v", err))
	}
	if c.opts.Client == nil {
		return c.fail(ec, http.StatusServiceUnavailable, "models", errNoTemporal.Error())
	}
	ctx, cancel := context.WithTimeout(ec.Request().Context(), 15*time.Second)
	defer cancel()
	b, err := c.rolloutOf(ctx, name, time.Now())
	switch {
	case err != nil:
		c.log.Warn("read rollout", "model", name, "error", err)
		return c.fail(ec, http.StatusBadGateway, "models", err.Error())
	case b == nil:
		return c.fail(ec, http.StatusNotFound, "models", fmt.Sprintf("model %s has no rollout", name))
	}
	refresh := 0
	if b.Running {
		refresh = 5
	}
	return c.render(ec, http.StatusOK, "rollout", page{Title: "Rollout of " + name, Nav: "models", Refresh: refresh, Body: b})
}
