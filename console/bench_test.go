package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/labstack/echo/v4"
)

// renderJobPage renders the job page of the job directory dir (as the
// job handler does once it found dir in the job's history) and returns
// the page and what it read.
func renderJobPage(tb testing.TB, c *Console, e *echo.Echo, id, dir string) (*httptest.ResponseRecorder, *jobBody) {
	body := &jobBody{ID: id, JobDir: dir, Status: "SUCCEEDED"}
	c.readJob(context.Background(), body, "run-1")
	rec := httptest.NewRecorder()
	ec := e.NewContext(httptest.NewRequest(http.MethodGet, "/console/jobs/"+id, nil), rec)
	if err := c.render(ec, http.StatusOK, "job", page{Title: "Job " + id, Nav: "jobs", Body: body}); err != nil {
		tb.Fatal(err)
	}
	return rec, body
}

// BenchmarkJobPage measures one view of the job page of each synthetic
// job (synthJobs): time, bytes allocated (B/op) and the page's size.
// Compare with main's code by running the same jobs through its readJob.
func BenchmarkJobPage(b *testing.B) {
	for _, j := range synthJobs {
		root := b.TempDir()
		dir := filepath.Join(root, j.ID)
		j.write(b, dir)
		c, err := New(Options{Roots: []string{root}})
		if err != nil {
			b.Fatal(err)
		}
		e := echo.New()
		b.Run(j.ID, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			var read int64
			for b.Loop() {
				rec, body := renderJobPage(b, c, e, j.ID, dir)
				size = rec.Body.Len()
				if body.Data == nil {
					b.Fatalf("no data: %s", body.DirError)
				}
				read = body.Data.BytesRead
			}
			b.ReportMetric(float64(size), "page-bytes")
			b.ReportMetric(float64(read), "read-bytes")
		})
	}
}
