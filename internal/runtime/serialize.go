package runtime

import (
	"errors"
	"fmt"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/deepequal"
)

// ErrNotSerializable is returned, under Config.ForceSerialization, for a
// message or reply that could not cross the network: the codec refuses it
// (the codec's own error is wrapped too), or its copy differs from it
// (ErrLossyRoundTrip). Nothing is delivered.
var ErrNotSerializable = errors.New("entity: does not serialize")

// ErrLossyRoundTrip is wrapped in ErrNotSerializable when a codec round trip
// succeeds but changes the value: an unexported field comes back empty, a
// field of interface type comes back as map[string]any or float64. Sent
// across the network, such a message would silently arrive different.
var ErrLossyRoundTrip = errors.New("codec round trip changed the value")

// roundTripExact copies v through the codec and checks that the copy
// equals v (time values compare with their Equal method).
func roundTripExact[T any](r *codec.Registry, v T) (T, error) {
	copied, err := codec.RoundTrip(r, v)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%w: %w", ErrNotSerializable, err)
	}
	if !deepequal.Equal(copied, v) {
		return copied, lossy(v, copied)
	}
	return copied, nil
}

func lossy(sent, received any) error {
	return fmt.Errorf("%w: %w: %T sent as %+v arrives as %+v", ErrNotSerializable, ErrLossyRoundTrip, sent, sent, received)
}
