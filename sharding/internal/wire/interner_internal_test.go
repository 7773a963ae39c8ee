package wire

import (
	"fmt"
	"sync"
	"testing"
)

// TestInternerSharesAndNeverMixesUp: a string read again is the same
// string, not a new allocation; and decoders on many goroutines reading
// strings that share slots each get back exactly the bytes they read.
func TestInternerSharesAndNeverMixesUp(t *testing.T) {
	in := newInterner()
	a := in.get([]byte("shard-7"))
	if allocs := testing.AllocsPerRun(100, func() { _ = in.get([]byte("shard-7")) }); allocs != 0 {
		t.Fatalf("reading an interned string again allocated %v times, want 0", allocs)
	}
	if b := in.get([]byte("shard-7")); b != a {
		t.Fatalf("got %q, want %q", b, a)
	}
	// More distinct strings than slots, so goroutines overwrite each
	// other's slots all the time.
	words := make([][]byte, 4*internSlots)
	for i := range words {
		words[i] = fmt.Appendf(nil, "entity-%d", i)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := range 20_000 {
				w := words[(n*7+g*131)%len(words)]
				if got := in.get(w); got != string(w) {
					t.Errorf("get(%q) = %q", w, got)
					return
				}
			}
		})
	}
	wg.Wait()
	if long := make([]byte, internMax+1); in.get(long) != string(long) {
		t.Fatal("a string over internMax came back changed")
	}
}
