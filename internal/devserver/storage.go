package devserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	postgresplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/resolver"
	dbschemas "go.temporal.io/server/schema"
	postgresschema "go.temporal.io/server/schema/postgresql/v12"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"google.golang.org/protobuf/types/known/durationpb"
)

// store is where the server keeps its state: one SQLite file, or two
// PostgreSQL databases (executions and visibility) on a server the operator
// runs.
type store struct {
	main, visibility *config.SQL
}

// sqlite reports whether the store is the SQLite file.
func (st store) sqlite() bool { return st.main.PluginName == sqliteplugin.PluginName }

// sqliteStore keeps everything in the SQLite file at path.
func sqliteStore(path string) store {
	cfg := sqliteConfig(path)
	return store{main: cfg, visibility: cfg}
}

// postgresStore parses a postgres://user:password@host:port/database URL
// (query parameters such as sslmode are passed to the driver). Visibility
// records go to a second database named database + "_visibility".
func postgresStore(dsn string) (store, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return store{}, fmt.Errorf("database URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return store{}, fmt.Errorf("database URL: scheme %q is not postgres:// (SQLite needs no URL)", u.Scheme)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || strings.Contains(name, "/") || u.Host == "" {
		return store{}, errors.New("database URL: want postgres://user:password@host:port/database")
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	attrs := map[string]string{}
	for k, v := range u.Query() {
		attrs[k] = v[len(v)-1]
	}
	password, _ := u.User.Password()
	cfg := func(db string) *config.SQL {
		return &config.SQL{
			PluginName: postgresplugin.PluginName, DatabaseName: db,
			ConnectAddr: host, ConnectProtocol: "tcp",
			User: u.User.Username(), Password: password,
			ConnectAttributes: maps.Clone(attrs),
			MaxConns:          20, MaxIdleConns: 20,
		}
	}
	return store{main: cfg(name), visibility: cfg(name + "_visibility")}, nil
}

// name describes the store for logs without credentials.
func (st store) name() string {
	if st.sqlite() {
		return st.main.DatabaseName
	}
	return "postgres://" + st.main.ConnectAddr + "/" + st.main.DatabaseName
}

// setup creates the Temporal schema where it is missing and checks it
// where it exists.
func (st store) setup(logger log.Logger) error {
	if st.sqlite() {
		return setupSchema(st.main, logger)
	}
	if err := setupPostgres(st.main, "postgresql/v12/temporal", postgresschema.Version, requiredTables[:3], logger); err != nil {
		return err
	}
	return setupPostgres(st.visibility, "postgresql/v12/visibility", postgresschema.VisibilityVersion, requiredTables[3:], logger)
}

// setupPostgres creates the database cfg names if it is missing (through
// the server's default database "postgres"), then Temporal's schema
// schemaName (a directory of the server's embedded schema files) at
// version in an empty one, as temporal-sql-tool setup-schema does; a
// non-empty one must hold the tables named by required.
func setupPostgres(cfg *config.SQL, schemaName, version string, required []string, logger log.Logger) error {
	admin := cloneSQL(cfg)
	admin.DatabaseName = "postgres"
	if err := withAdminDB(admin, logger, func(db sqlplugin.AdminDB) error { return db.CreateDatabase(cfg.DatabaseName) }); err != nil {
		return fmt.Errorf("create database %s: %w", cfg.DatabaseName, err)
	}
	return withAdminDB(cfg, logger, func(db sqlplugin.AdminDB) error {
		tables, err := db.ListTables(cfg.DatabaseName)
		if err != nil {
			return fmt.Errorf("list tables of %s: %w", cfg.DatabaseName, err)
		}
		if len(tables) > 0 {
			for _, t := range required {
				if !slices.Contains(tables, t) {
					return fmt.Errorf("database %s has no table %q: not a Temporal database, or its first setup was interrupted (drop it to start over)", cfg.DatabaseName, t)
				}
			}
			return nil
		}
		text, err := fs.ReadFile(dbschemas.Assets(), path.Join(schemaName, "schema.sql"))
		if err != nil {
			return err
		}
		stmts, err := persistence.LoadAndSplitQueryFromReaders([]io.Reader{bytes.NewReader(text)})
		if err != nil {
			return fmt.Errorf("parse %s schema: %w", schemaName, err)
		}
		if err := db.CreateSchemaVersionTables(); err != nil {
			return fmt.Errorf("create schema version tables in %s: %w", cfg.DatabaseName, err)
		}
		for _, stmt := range stmts {
			if err := db.Exec(stmt); err != nil {
				return fmt.Errorf("create schema in %s: %w", cfg.DatabaseName, err)
			}
		}
		// The version last: a database without it fails the check above
		// and is dropped and set up again by the operator.
		if err := db.UpdateSchemaVersion(cfg.DatabaseName, version, version); err != nil {
			return fmt.Errorf("record schema version in %s: %w", cfg.DatabaseName, err)
		}
		return nil
	})
}

// withAdminDB runs fn on an admin connection to the database cfg names.
func withAdminDB(cfg *config.SQL, logger log.Logger, fn func(sqlplugin.AdminDB) error) (err error) {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("open %s: %w", cfg.DatabaseName, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	return fn(db)
}

// cloneSQL returns a copy of cfg that DoCreateDatabase may modify.
func cloneSQL(cfg *config.SQL) *config.SQL {
	c := *cfg
	c.ConnectAttributes = maps.Clone(cfg.ConnectAttributes)
	return &c
}

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
