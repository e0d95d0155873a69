package pgproc

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestStartRestartKeepsData(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "pgproc-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	defer os.RemoveAll(dir)

	s, err := Start(ctx, dir+"/pg")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	s.Stop()

	s, err = Start(ctx, dir+"/pg")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err = pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after restart got %d, %v; want 7", v, err)
	}
}
