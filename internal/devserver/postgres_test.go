package devserver

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/testenv/pgtest"
)

// TestPostgresRestartKeepsHistory runs the server on a real PostgreSQL
// (the docker-compose cluster's database, without Docker): Start creates
// both databases and the schema, a workflow runs, and after a restart on
// the same databases, from another Home, its history and the search
// attributes are still there. No SQLite file is written.
func TestPostgresRestartKeepsHistory(t *testing.T) {
	pg := pgtest.Use(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	db := pg.Database("temporal_restart")
	home := t.TempDir()
	opts := Options{Home: home, Database: db, FrontendAddr: "127.0.0.1:0", SearchAttributes: testAttrs, Logger: testLogger(t)}

	s1 := startServer(t, opts)
	c1 := dial(t, s1)
	id := runEcho(ctx, t, c1, "pg-restart-wf", temporal.SearchAttributes{})
	aliases1 := aliases(ctx, t, c1, s1.Namespace())
	c1.Close()
	if err := s1.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, DBFile)); !os.IsNotExist(err) {
		t.Errorf("stat %s: %v, want no SQLite file with Database set", DBFile, err)
	}

	opts.Home = t.TempDir()
	s2 := startServer(t, opts)
	c2 := dial(t, s2)
	desc, err := c2.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatalf("DescribeWorkflowExecution(%s) after restart: %v", id, err)
	}
	if got, want := desc.GetWorkflowExecutionInfo().GetStatus(), enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED; got != want {
		t.Errorf("status of %s after restart = %v, want %v", id, got, want)
	}
	checkSearchAttributes(ctx, t, c2, s2.Namespace(), testAttrs)
	if aliases2 := aliases(ctx, t, c2, s2.Namespace()); !maps.Equal(aliases2, aliases1) {
		t.Errorf("search attribute columns after restart = %v, want unchanged %v", aliases2, aliases1)
	}
	// Visibility is in its own database: listing finds the workflow.
	query := "WorkflowId = '" + id + "'"
	err = poll(ctx, "visibility", func(ctx context.Context) error {
		resp, err := c2.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s2.Namespace(), Query: query})
		if err != nil {
			return err
		}
		if n := len(resp.GetExecutions()); n != 1 {
			return fmt.Errorf("ListWorkflow(%s) = %d executions, want 1", query, n)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func TestPostgresURLValidation(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"mysql://u:p@h/db", "not postgres"},
		{"postgres://u:p@h/", "want postgres://"},
		{"postgres:///db", "want postgres://"},
		{"postgres://u:p@h/a/b", "want postgres://"},
	} {
		_, err := Start(context.Background(), Options{Home: t.TempDir(), Database: tc.url, FrontendAddr: "127.0.0.1:0", Logger: testLogger(t)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start with Database %q: err = %v, want one containing %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), ":p@") {
			t.Errorf("error %q shows the password", err)
		}
	}
	st, err := postgresStore("postgres://u:secret@db.example:6000/temporal?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if st.main.ConnectAddr != "db.example:6000" || st.main.DatabaseName != "temporal" || st.visibility.DatabaseName != "temporal_visibility" ||
		st.main.User != "u" || st.main.Password != "secret" || st.main.ConnectAttributes["sslmode"] != "disable" {
		t.Errorf("postgresStore = %+v / %+v", *st.main, *st.visibility)
	}
	if strings.Contains(st.name(), "secret") {
		t.Errorf("name() = %q shows the password", st.name())
	}
}
