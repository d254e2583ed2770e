package mlapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobs"
)

// patch is projects.jobs.patch: updateMask=labels replaces a running
// job's labels (the only field Cloud ML Engine let change). The body is a
// Job (one read with get may be sent back as it is); with an etag, it
// must be the job's current one, or nothing changes (409 ABORTED). The
// job's workflow records the labels in its memo, so a job that has ended
// cannot change: 400 FAILED_PRECONDITION (a deviation).
func (a *API) patch(c echo.Context) error {
	if _, err := a.project(c); err != nil {
		return err
	}
	id, method := splitMethod(c.Param("*"))
	if method != "" {
		return notFound("PATCH :%s: not a method of jobs", clip(method))
	}
	if err := ident.Check(id); err != nil {
		return notFound("job %q: no such job (a job ID is letters, digits and '_')", clip(id))
	}
	if err := checkQuery(c, "updateMask"); err != nil {
		return err
	}
	mask := c.QueryParam("updateMask")
	for f := range strings.SplitSeq(mask, ",") {
		if strings.TrimSpace(f) != "labels" {
			return invalid("updateMask %q: only labels can change (updateMask=labels)", clip(mask))
		}
	}
	var req Job
	if err := a.decodeBody(c, &req); err != nil {
		return err
	}
	if err := checkLabels(req.Labels); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	cur, err := a.job(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case req.Etag != "" && req.Etag != cur.Etag:
		return &apiError{code: http.StatusConflict, status: "ABORTED", msg: "etag: the job changed since it was read; get it again and retry"}
	case cur.EndTime != "":
		return ended(id, cur.State)
	}
	err = jobs.SetLabels(ctx, a.opts.Client, id, req.Labels)
	var nf *serviceerror.NotFound
	var ae *temporal.ApplicationError
	switch {
	case errors.As(err, &nf): // it ended since
		return ended(id, "ended")
	case errors.As(err, &ae): // the workflow's validator
		return invalid("%s", ae.Message())
	case err != nil:
		return err
	}
	return a.getJSON(c, ctx, id)
}

// ended is the answer to a change of a job that has ended.
func ended(id, state string) error {
	return &apiError{code: http.StatusBadRequest, status: "FAILED_PRECONDITION",
		msg: "job " + id + " is " + state + ": the labels of a job that has ended cannot change (Temporal keeps a closed job's memo as it was)"}
}

// getJSON answers job id as get does.
func (a *API) getJSON(c echo.Context, ctx context.Context, id string) error {
	job, err := a.job(ctx, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, job)
}
