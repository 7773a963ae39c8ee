package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The helper removes its containers when its stdin closes, as it does when
// the test process dies: no container outlives the tests.
func TestHelperRemovesContainersWhenItsInputCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	helper, skip, err := startHelper(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	image, err := chooseImage(ctx, t, helper)
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ ID, DSN string }
	if err := helper.Call(ctx, "run", map[string]any{"image": image, "port": port}, &c); err != nil {
		t.Fatal(err)
	}
	s := &Server{dsn: c.DSN}
	if err := s.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := helper.Close(ctx); err != nil { // returns once the helper exited
		t.Fatal(err)
	}
	connCtx, cancelConn := context.WithTimeout(ctx, 10*time.Second)
	defer cancelConn()
	if conn, err := pgx.Connect(connCtx, c.DSN); err == nil {
		conn.Close(ctx)
		t.Fatalf("container %s still serves %s after its helper exited", c.ID, c.DSN)
	}
}
