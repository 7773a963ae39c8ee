package remote_test

import (
	"io"
	"log/slog"

	"github.com/shoal-dev/shoal/entity/codec"
)

// Add is a user command the tests send across.
type Add struct{ N int }

// Count is a reply.
type Count struct {
	N    int
	Node string
}

func newCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[Add](reg, "test.Add")
	codec.MustRegister[Count](reg, "test.Count")
	return reg
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
