package sqlite

import (
	"context"
	"testing"

	"github.com/ferry-ml/ferry/internal/store"
)

// UpdateJob writes nothing when fn leaves the job as it was (and returns
// no event), and writes when it changes it. PRAGMA data_version, read on
// one reader connection, changes when another connection commits a write.
func TestUpdateJobSkipsAnUnchangedRow(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if _, err := s.CreateJob(ctx, store.Job{Name: "j", Status: "Queued"}, store.Event{To: "Queued"}); err != nil {
		t.Fatal(err)
	}
	conn, err := s.r.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	version := func() int64 {
		t.Helper()
		var v int64
		if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	v0 := version()
	if _, err := s.UpdateJob(ctx, "j", func(j *store.Job) (*store.Event, error) {
		j.Status = "Queued" // as it was
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != v0 {
		t.Errorf("an update that changed nothing wrote the database (data_version %d -> %d)", v0, v)
	}
	j, err := s.UpdateJob(ctx, "j", func(j *store.Job) (*store.Event, error) {
		j.Status = "Preparing"
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := version(); v == v0 {
		t.Error("an update that changed the status did not write the database")
	}
	if got, err := s.GetJob(ctx, "j"); err != nil || got.Status != "Preparing" || j.Status != "Preparing" {
		t.Errorf("after the update: stored %q (%v), returned %q; want Preparing", got.Status, err, j.Status)
	}
}
