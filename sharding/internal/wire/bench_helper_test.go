package wire_test

import "github.com/shoal-dev/shoal/entity/codec"

func registerCount(reg *codec.Registry) error { return codec.Register[count](reg, "bench.Count") }
