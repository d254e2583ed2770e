package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// rolloutBody is a model's rollout (workflows.RolloutJob under
// workflows.RolloutWorkflowID) as the console shows it: live from its
// status query while it runs, from its result once it ended.
type rolloutBody struct {
	Model, ID, Status string
	Running           bool
	Start, End        string
	// St is the status query's answer or the result; nil when neither
	// could be read (Error says why).
	St    *workflows.RolloutStatus
	Error string
	// Steps are St.Steps with where the rollout is on them.
	Steps []rolloutStepRow
	// Hold is the time left before the current window is judged.
	Hold string
	// Gates are the last verdict's values, one row per gate.
	Gates []gateRow
}

type rolloutStepRow struct {
	Name, State, Verdict string
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
	b.fill(now)
	return b, nil
}

// fill derives the step rows, the hold left and the gate rows from b.St.
func (b *rolloutBody) fill(now time.Time) {
	st := b.St
	ended := st.State == workflows.RolloutPromoted || st.State == workflows.RolloutRolledBack
	for i, name := range st.Steps {
		r := rolloutStepRow{Name: name, State: "pending"}
		switch {
		case st.Verdicts != nil && st.Verdicts[name].Outcome == rollout.Pass:
			r.State = "done"
		case i == st.Step && st.State == workflows.RolloutRolledBack:
			r.State = "failed"
		case i == st.Step && !ended && st.State != workflows.RolloutStarting:
			r.State = "current"
		}
		if v, ok := st.Verdicts[name]; ok {
			r.Verdict = v.Outcome
		}
		b.Steps = append(b.Steps, r)
	}
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

// Verdict is the last verdict's outcome and reasons, as one line.
func (b *rolloutBody) Verdict() string {
	if b.St == nil || b.St.Last == nil {
		return ""
	}
	if len(b.St.Last.Reasons) == 0 {
		return b.St.Last.Outcome
	}
	return b.St.Last.Outcome + ": " + strings.Join(b.St.Last.Reasons, "; ")
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
