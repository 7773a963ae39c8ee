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

// Blob is a user message whose serializer keeps its input, as a
// zero-copy binary serializer would: the value shares the payload's bytes.
type Blob []byte

type keepingSerializer struct{}

func (keepingSerializer) Marshal(v any) ([]byte, error) { return v.(Blob), nil }
func (keepingSerializer) Unmarshal(data []byte, ptr any) error {
	*ptr.(*Blob) = data
	return nil
}

func newCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[Blob](reg, "test.Blob", codec.WithSerializer(keepingSerializer{}))
	codec.MustRegister[Add](reg, "test.Add")
	codec.MustRegister[Count](reg, "test.Count")
	codec.MustRegister[Get](reg, "test.Get")
	return reg
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
