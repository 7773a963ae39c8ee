package codec_test

import (
	"testing"

	"github.com/shoal-dev/shoal/entity/codec"
)

// The decoding paths of a stored event, side by side: Decode is the single
// value path, DecodeAll the one every read path of stored events takes.
func BenchmarkDecodeStored(b *testing.B) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep", codec.Aliases("dep-old"))
	codec.MustRegister[Withdrawn](r, "wd")
	codec.MustUpcast(r, "dep/v1", func(old depositedV1) []any {
		return []any{Deposited{Account: old.Acct, Amount: old.Cents}}
	})
	codec.MustUpcast(r, "transferred/v1", func(old transferredV1) []any {
		return []any{Withdrawn{Amount: old.Amount}, Deposited{Amount: old.Amount}}
	})
	current := []byte(`{"Account":"a-1","Amount":42}`)
	v1 := []byte(`{"Acct":"a-1","Cents":42}`)
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Decode("dep", current); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeAll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.DecodeAll("dep", current); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendDecoded", func(b *testing.B) {
		b.ReportAllocs()
		var buf []any
		for b.Loop() {
			var err error
			if buf, err = r.AppendDecoded(buf[:0], "dep", current); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeAll/alias", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.DecodeAll("dep-old", current); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeAll/upcast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.DecodeAll("dep/v1", v1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeAll/split", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.DecodeAll("transferred/v1", []byte(`{"Amount":3}`)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
