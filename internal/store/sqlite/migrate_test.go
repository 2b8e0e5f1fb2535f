package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/store"
)

// openRaw opens a database with the writer's settings but no migrations.
func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, nil))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func appliedVersions(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.Query("SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestMigrateAppliesEachOnce(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t, filepath.Join(t.TempDir(), "m.db"))
	// Neither file may run twice: CREATE TABLE would fail, INSERT would add
	// a second row. 0010 sorts after 0002 by number, not by name length.
	fsys := fstest.MapFS{
		"0010_c.sql": {Data: []byte("INSERT INTO a VALUES (10);")},
		"0001_a.sql": {Data: []byte("CREATE TABLE a (x INTEGER);\nINSERT INTO a VALUES (1);")},
		"0002_b.sql": {Data: []byte("INSERT INTO a VALUES (2);")},
		"README":     {Data: []byte("not a migration")},
	}
	first := fstest.MapFS{"0001_a.sql": fsys["0001_a.sql"]}

	if err := migrate(ctx, db, first); err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	for range 2 {
		if err := migrate(ctx, db, fsys); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	if d := cmp.Diff([]int{1, 2, 10}, appliedVersions(t, db)); d != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", d)
	}
	var got string
	if err := db.QueryRow("SELECT group_concat(x, ',') FROM (SELECT x FROM a ORDER BY rowid)").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "1,2,10" {
		t.Errorf("rows written by the migrations = %s, want 1,2,10", got)
	}
}

func TestMigrateFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t, filepath.Join(t.TempDir(), "m.db"))
	fsys := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE a (x INTEGER);")},
		"0002_b.sql": {Data: []byte("INSERT INTO a VALUES (2); INSERT INTO nope VALUES (1);")},
	}
	err := migrate(ctx, db, fsys)
	if err == nil || !strings.Contains(err.Error(), "0002_b.sql") {
		t.Fatalf("migrate with a broken migration: got error %v, want one naming 0002_b.sql", err)
	}
	if d := cmp.Diff([]int{1}, appliedVersions(t, db)); d != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", d)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM a").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a failed migration left %d rows behind", n)
	}
}

func TestMigrateRefusesNewerDatabase(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t, filepath.Join(t.TempDir(), "m.db"))
	newer := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE a (x INTEGER);")},
		"0002_b.sql": {Data: []byte("CREATE TABLE b (x INTEGER);")},
	}
	if err := migrate(ctx, db, newer); err != nil {
		t.Fatal(err)
	}
	older := fstest.MapFS{"0001_a.sql": newer["0001_a.sql"]}
	if err := migrate(ctx, db, older); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("migrate of a newer database: got error %v, want one saying it is newer", err)
	}
}

func TestLoadMigrationsRejectsBadNames(t *testing.T) {
	for _, fsys := range []fstest.MapFS{
		{"init.sql": {}},
		{"0000_zero.sql": {}},
		{"01.sql": {}},
		{"0001_a.sql": {}, "1_b.sql": {}},
	} {
		if _, err := loadMigrations(fsys); err == nil {
			t.Errorf("loadMigrations(%v) succeeded", fsys)
		}
	}
}

func TestEmbeddedMigrations(t *testing.T) {
	ms, err := loadMigrations(migrations())
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.version != i+1 {
			t.Errorf("migration %s has version %d, want %d: versions run 1, 2, 3, ...", m.name, m.version, i+1)
		}
	}
}

func TestReopenAppliesNothingTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ferry.db")
	for range 3 {
		s, err := Open(path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := loadMigrations(migrations())
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, m := range ms {
		want = append(want, m.version)
	}
	if d := cmp.Diff(want, appliedVersions(t, openRaw(t, path))); d != "" {
		t.Errorf("schema_migrations after three opens (-want +got):\n%s", d)
	}
}

func TestConnectionSettings(t *testing.T) {
	s := openStore(t)
	for _, tt := range []struct {
		pool   string
		db     *sql.DB
		pragma string
		want   string
	}{
		{"writer", s.w, "journal_mode", "wal"},
		{"writer", s.w, "synchronous", "1"}, // NORMAL
		{"writer", s.w, "foreign_keys", "1"},
		{"writer", s.w, "busy_timeout", "10000"},
		{"reader", s.r, "journal_mode", "wal"},
		{"reader", s.r, "foreign_keys", "1"},
		{"reader", s.r, "busy_timeout", "10000"},
		{"reader", s.r, "query_only", "1"},
	} {
		var got string
		if err := tt.db.QueryRow("PRAGMA " + tt.pragma).Scan(&got); err != nil {
			t.Fatalf("%s: PRAGMA %s: %v", tt.pool, tt.pragma, err)
		}
		if got != tt.want {
			t.Errorf("%s: PRAGMA %s = %s, want %s", tt.pool, tt.pragma, got, tt.want)
		}
	}
	for _, idx := range []string{"jobs_status", "jobs_compute", "metrics_job_name"} {
		var n int
		if err := s.r.QueryRow("SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = ?", idx).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("index %s is missing", idx)
		}
	}
}

// The dispatcher's question (a compute's first queued jobs by priority,
// of those not handed to an engine yet)
// must be answered from the jobs_queue index, not by sorting every queued
// job of the compute on each pass. It is asked as ListJobs asks it.
func TestQueueQueryUsesItsIndex(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.r.Query(`EXPLAIN QUERY PLAN SELECT `+jobColumns+` FROM jobs WHERE status IN (?) AND compute = ? AND handle = '' ORDER BY priority DESC, seq LIMIT ?`, "Queued", "local", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	got := strings.Join(plan, "; ")
	if !strings.Contains(got, "jobs_queue") || strings.Contains(got, "TEMP B-TREE") {
		t.Errorf("query plan %q: want the jobs_queue index and no sort", got)
	}
}

// A job stored before jobs had a handle (migration 0008) reads back with
// none, is a dispatcher candidate (HandleUnset), and can be given one.
func TestHandleMigrationKeepsOldJobs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ferry.db")
	ms, err := loadMigrations(migrations())
	if err != nil {
		t.Fatal(err)
	}
	before := fstest.MapFS{}
	for _, m := range ms {
		if m.version < 8 {
			before[m.name] = &fstest.MapFile{Data: []byte(m.sql)}
		}
	}
	db := openRaw(t, path)
	if err := migrate(ctx, db, before); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO jobs (name, display_name, experiment_name, compute, status, status_reason,
		priority, attempt, error, created_by, cancel_by, code_snapshot)
		VALUES ('old', '', '', 'local', 'Queued', '', 0, 0, '', 'owner', '', '')`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := s.GetJob(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if j.Handle != "" {
		t.Errorf("Handle of a job stored before 0008 = %q, want empty", j.Handle)
	}
	queued, err := s.ListJobs(ctx, store.JobFilter{Statuses: []string{"Queued"}, Compute: "local", Handle: store.HandleUnset, ByPriority: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 1 || queued[0].Name != "old" {
		t.Errorf("the dispatcher's read = %v, want the old job", queued)
	}
	if _, err := s.UpdateJob(ctx, "old", func(j *store.Job) (*store.Event, error) {
		j.Handle = "77"
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if j, err := s.GetJob(ctx, "old"); err != nil || j.Handle != "77" {
		t.Errorf("GetJob after storing a handle = %q, %v; want 77", j.Handle, err)
	}
}

// A database from before models (every migration before the one that adds
// them) upgrades with its environments kept and an empty, usable model
// registry. The migration is found by name, not number, so the test
// holds wherever it lands in the sequence.
func TestModelsMigrationUpgrades(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ferry.db")
	ms, err := loadMigrations(migrations())
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for _, m := range ms {
		if strings.HasSuffix(m.name, "_models.sql") {
			at = m.version
		}
	}
	if at < 0 {
		t.Fatal("no NNNN_models.sql migration")
	}
	before := fstest.MapFS{}
	for _, m := range ms {
		if m.version < at {
			before[m.name] = &fstest.MapFile{Data: []byte(m.sql)}
		}
	}
	db := openRaw(t, path)
	if err := migrate(ctx, db, before); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO environments (name, version, description, spec, hash, created)
		VALUES ('torch', '1', '', '{}', 'h', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetEnvironment(ctx, "torch", "1"); err != nil {
		t.Errorf("the environment stored before models: %v", err)
	}
	if got, err := s.ListModels(ctx, ""); err != nil || len(got) != 0 {
		t.Errorf("ListModels after the upgrade = %v, %v; want none", got, err)
	}
	m := store.Model{Name: "iris", Version: "1", Type: "custom_model", Snapshot: "s", Hash: "h"}
	if err := s.CreateModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetModel(ctx, "iris", "1"); err != nil || got.Archived {
		t.Errorf("GetModel = %+v, %v; want it, not archived", got, err)
	}
}

// A database from before endpoints upgrades with its models kept and an
// empty, usable endpoints table. The migration is found by name.
func TestEndpointsMigrationUpgrades(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ferry.db")
	ms, err := loadMigrations(migrations())
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for _, m := range ms {
		if strings.HasSuffix(m.name, "_endpoints.sql") {
			at = m.version
		}
	}
	if at < 0 {
		t.Fatal("no NNNN_endpoints.sql migration")
	}
	before := fstest.MapFS{}
	for _, m := range ms {
		if m.version < at {
			before[m.name] = &fstest.MapFile{Data: []byte(m.sql)}
		}
	}
	db := openRaw(t, path)
	if err := migrate(ctx, db, before); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO models (name, version, type, description, spec, snapshot, hash, created)
		VALUES ('iris', '1', 'custom_model', '', '{}', 's', 'h', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetModel(ctx, "iris", "1"); err != nil {
		t.Errorf("the model stored before endpoints: %v", err)
	}
	if got, err := s.ListEndpoints(ctx); err != nil || len(got) != 0 {
		t.Errorf("ListEndpoints after the upgrade = %v, %v; want none", got, err)
	}
	e := store.Endpoint{Name: "iris-ep", Spec: []byte(`{}`), State: "Succeeded", PrimaryKey: "p", SecondaryKey: "s"}
	if err := s.CreateEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetEndpoint(ctx, "iris-ep"); err != nil || got.PrimaryKey != "p" {
		t.Errorf("GetEndpoint = %+v, %v", got, err)
	}
}

// A database from before data assets upgrades with its models kept and an
// empty, usable data registry. The migration is found by name, so the
// test holds if it is renumbered.
func TestDataMigrationUpgrades(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ferry.db")
	ms, err := loadMigrations(migrations())
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for _, m := range ms {
		if strings.HasSuffix(m.name, "_data.sql") {
			at = m.version
		}
	}
	if at < 0 {
		t.Fatal("no NNNN_data.sql migration")
	}
	before := fstest.MapFS{}
	for _, m := range ms {
		if m.version < at {
			before[m.name] = &fstest.MapFile{Data: []byte(m.sql)}
		}
	}
	db := openRaw(t, path)
	if err := migrate(ctx, db, before); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO models (name, version, type, description, spec, snapshot, hash, created)
		VALUES ('iris', '1', 'custom_model', '', '{}', 's', 'h', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetModel(ctx, "iris", "1"); err != nil {
		t.Errorf("the model stored before data assets: %v", err)
	}
	if got, err := s.ListData(ctx, ""); err != nil || len(got) != 0 {
		t.Errorf("ListData after the upgrade = %v, %v; want none", got, err)
	}
	d := store.DataAsset{Name: "cifar", Version: "1", Type: "uri_folder", Snapshot: "s", Hash: "h"}
	if err := s.CreateData(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetData(ctx, "cifar", "1"); err != nil || got.Archived {
		t.Errorf("GetData = %+v, %v; want it, not archived", got, err)
	}
}
