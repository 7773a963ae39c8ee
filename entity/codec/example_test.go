package codec_test

import (
	"fmt"

	"github.com/shoal-dev/shoal/entity/codec"
)

// Today's events.
type Captured struct {
	Payment     string
	AmountCents int64
}

type FeeCharged struct {
	Payment  string
	FeeCents int64
}

// capturedV1 is how Captured was first stored: the amount in whole units,
// the fee in the same event. It is only read, never written.
type capturedV1 struct {
	ID     string
	Amount int64
	Fee    int64
}

// Example_schemaEvolution reads a history written by three versions of a
// payment service: a renamed manifest, an old shape split in two, and an
// event kind that no longer exists.
func Example_schemaEvolution() {
	r := codec.NewRegistry()
	// Captured was once stored as "payment.Charged".
	codec.MustRegister[Captured](r, "payment.Captured", codec.Aliases("payment.Charged"))
	codec.MustRegister[FeeCharged](r, "payment.FeeCharged")
	// The first version stored amounts in whole units, fee included.
	codec.MustUpcast(r, "payment.Captured/v1", func(old capturedV1) []any {
		out := []any{Captured{Payment: old.ID, AmountCents: old.Amount * 100}}
		if old.Fee > 0 {
			out = append(out, FeeCharged{Payment: old.ID, FeeCents: old.Fee * 100})
		}
		return out
	})
	// Pings were events once; today's readers drop them.
	codec.MustRegisterUpcaster(r, "payment.Pinged", func([]byte) ([]any, error) { return nil, nil })

	stored := []struct{ manifest, payload string }{
		{"payment.Captured/v1", `{"ID":"p-1","Amount":12,"Fee":1}`},
		{"payment.Pinged", `{}`},
		{"payment.Charged", `{"Payment":"p-2","AmountCents":500}`},
		{"payment.Captured", `{"Payment":"p-3","AmountCents":700}`},
	}
	for _, row := range stored {
		events, err := r.DecodeAll(row.manifest, []byte(row.payload))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-20s -> %+v\n", row.manifest, events)
	}
	// Writing always uses the current manifest.
	manifest, _, _ := r.Encode(Captured{Payment: "p-4", AmountCents: 1})
	fmt.Println("written as", manifest)

	// Output:
	// payment.Captured/v1  -> [{Payment:p-1 AmountCents:1200} {Payment:p-1 FeeCents:100}]
	// payment.Pinged       -> []
	// payment.Charged      -> [{Payment:p-2 AmountCents:500}]
	// payment.Captured     -> [{Payment:p-3 AmountCents:700}]
	// written as payment.Captured
}
