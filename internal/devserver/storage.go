package devserver

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/resolver"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"google.golang.org/protobuf/types/known/durationpb"
)

// sqliteConfig returns the SQL store configuration for the database file at
// path.
//
// ConnectAttributes other than SQLite URI parameters (mode, cache, ...) are
// applied by the plugin as PRAGMAs on every connection:
//   - mode=rwc creates the file if it is missing;
//   - journal_mode=wal keeps committed transactions in a write-ahead log, so
//     a killed process loses nothing that was committed;
//   - synchronous=normal fsyncs at WAL checkpoints only: safe against process
//     death, may lose the last commits (never the file) on power loss;
//   - busy_timeout=5000 waits up to 5 s instead of failing with SQLITE_BUSY
//     when another connection holds the write lock (the plugin itself uses a
//     single connection per file).
//
// The attributes must be identical on every Start: the plugin keeps one
// connection per distinct DSN for the life of the process and reuses it.
func sqliteConfig(path string) *config.SQL {
	return &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: path,
		ConnectAttributes: map[string]string{
			"mode":         "rwc",
			"journal_mode": "wal",
			"synchronous":  "normal",
			"busy_timeout": "5000",
		},
	}
}

// requiredTables are tables the Temporal SQLite schema creates; the
// execution schema is applied before the visibility schema, so the last one
// missing means an interrupted setup.
var requiredTables = []string{"namespaces", "executions", "cluster_membership", "executions_visibility"}

// setupSchema creates the Temporal schema in an empty database and checks
// that a non-empty one holds it.
func setupSchema(cfg *config.SQL, logger log.Logger) (err error) {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("open %s: %w", cfg.DatabaseName, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()

	tables, err := db.ListTables(cfg.DatabaseName)
	if err != nil {
		return fmt.Errorf("list tables of %s: %w", cfg.DatabaseName, err)
	}
	if len(tables) == 0 {
		if err := sqliteschema.SetupSchemaOnDB(db); err != nil {
			return fmt.Errorf("create schema in %s: %w", cfg.DatabaseName, err)
		}
		return nil
	}
	for _, t := range requiredTables {
		if !slices.Contains(tables, t) {
			return fmt.Errorf("%s has no table %q: not a Temporal database, or its first setup was interrupted (delete the file to start over)", cfg.DatabaseName, t)
		}
	}
	return nil
}

// resetMembership deletes every row of the cluster_membership table.
//
// Each service records its membership address there with a heartbeat, and a
// starting service uses the rows younger than 20 s as gossip seeds. Matching
// starts first, so after a quick restart its only seeds are the dead
// addresses of the previous run: it waits out the 30 s join timeout and a
// 10 s retry before it joins, and the frontend answers "Not enough hosts" for
// everything that needs matching meanwhile. The rows are safe to drop because
// the lock on Home guarantees that no other server uses this database.
func resetMembership(cfg *config.SQL, logger log.Logger) (err error) {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("open %s: %w", cfg.DatabaseName, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	if err := db.Exec("DELETE FROM cluster_membership"); err != nil {
		return fmt.Errorf("reset cluster membership in %s: %w", cfg.DatabaseName, err)
	}
	return nil
}

// createNamespace registers namespace in the database unless a namespace of
// that name exists, which is then left untouched.
func createNamespace(cfg *config.SQL, cluster, namespace string, retention time.Duration) error {
	ns, err := sqliteschema.NewNamespaceConfig(cluster, namespace, false, nil)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	ns.Detail.Config.Retention = durationpb.New(retention)
	if err := sqliteschema.CreateNamespaces(cfg, ns); err != nil {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	return nil
}

// checkpoint copies the write-ahead log into the database file and truncates
// the log, so that after Stop temporal.db alone holds every commit.
//
// The plugin keeps its connection open until the process exits; this is the
// closest to closing the file that its public API allows.
func checkpoint(cfg *config.SQL, logger log.Logger) (err error) {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("open %s: %w", cfg.DatabaseName, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	if err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("checkpoint %s: %w", cfg.DatabaseName, err)
	}
	return nil
}
