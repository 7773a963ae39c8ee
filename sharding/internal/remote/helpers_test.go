package remote_test

import (
	"io"
	"log/slog"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
)

// Add is a user command the tests send across.
type Add struct{ N int }

// Get asks for a Count.
type Get struct{ ReplyTo entity.ReplyTo[Count] }

// Count is a reply.
type Count struct {
	N    int
	Node string
}

func newCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[Add](reg, "test.Add")
	codec.MustRegister[Count](reg, "test.Count")
	codec.MustRegister[Get](reg, "test.Get")
	return reg
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
