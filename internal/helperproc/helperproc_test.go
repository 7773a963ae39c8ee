package helperproc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/helperproc"
)

// A helper answers its ops and says which it does not know; once closed,
// calls fail with ErrExited.
func TestCallAndClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // the first run builds the helper
	defer cancel()
	p, err := helperproc.Start("pgcontainer")
	if err != nil {
		t.Fatal(err)
	}
	var health struct{ Reason *string }
	if err := p.Call(ctx, "health", nil, &health); err != nil || health.Reason == nil {
		t.Fatalf("health: %+v, %v", health, err)
	}
	err = p.Call(ctx, "no-such-op", map[string]string{"x": "y"}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown op "no-such-op"`) {
		t.Fatalf("an unknown op: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Call(ctx, "health", nil, nil); !errors.Is(err, helperproc.ErrExited) {
		t.Fatalf("a call after Close: %v, want ErrExited", err)
	}
}

// A program that does not build fails the first call with ErrExited and
// the go command's complaint.
func TestNoSuchProgram(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := helperproc.Start("no-such-program")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	err = p.Call(ctx, "health", nil, nil)
	if !errors.Is(err, helperproc.ErrExited) || !strings.Contains(err.Error(), "no-such-program") {
		t.Fatalf("err = %v, want ErrExited naming the program", err)
	}
}
