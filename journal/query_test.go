package journal_test

import (
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/journal"
)

// The slice of a persistence id is stored with every event: these vectors
// were computed once (and checked against md5sum by hand for "" and
// "Order|1") and must never change.
func TestSliceOfFixedVectors(t *testing.T) {
	for _, tc := range []struct {
		pid   string
		slice int
	}{
		{"", 29},
		{"a", 193},
		{"Order|1", 419},
		{"Order|42", 605},
		{"payment|shop-1/order1", 757},
		{"Σ|ünïcode", 653},
		{"x|", 768},
	} {
		if got := journal.SliceOf(tc.pid); got != tc.slice {
			t.Errorf("SliceOf(%q) = %d, want %d", tc.pid, got, tc.slice)
		}
	}
}

func TestSliceOfInRange(t *testing.T) {
	seen := map[int]bool{}
	for i := range 20000 {
		s := journal.SliceOf("e|" + string(rune('a'+i%26)) + string(rune(i)))
		if s < 0 || s >= journal.NumberOfSlices {
			t.Fatalf("slice %d outside [0, %d)", s, journal.NumberOfSlices)
		}
		seen[s] = true
	}
	if len(seen) < journal.NumberOfSlices*9/10 {
		t.Fatalf("20000 ids hit only %d of %d slices", len(seen), journal.NumberOfSlices)
	}
}

func TestEntityTypeOf(t *testing.T) {
	for pid, want := range map[string]string{
		"Order|1":   "Order",
		"Order|a|b": "Order",
		"|x":        "",
		"plain":     "",
		"":          "",
	} {
		if got := journal.EntityTypeOf(pid); got != want {
			t.Errorf("EntityTypeOf(%q) = %q, want %q", pid, got, want)
		}
	}
}

func TestSplitSlices(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7, 64, 1000, journal.NumberOfSlices} {
		rs, err := journal.SplitSlices(n)
		if err != nil {
			t.Fatalf("SplitSlices(%d): %v", n, err)
		}
		if len(rs) != n {
			t.Fatalf("SplitSlices(%d) gave %d ranges", n, len(rs))
		}
		next := 0
		for _, r := range rs {
			if err := r.Validate(); err != nil {
				t.Fatalf("SplitSlices(%d): %v", n, err)
			}
			if r.Min != next {
				t.Fatalf("SplitSlices(%d): range %v does not start at %d", n, r, next)
			}
			if size := r.Max - r.Min + 1; size < journal.NumberOfSlices/n || size > journal.NumberOfSlices/n+1 {
				t.Fatalf("SplitSlices(%d): range %v of size %d", n, r, size)
			}
			next = r.Max + 1
		}
		if next != journal.NumberOfSlices {
			t.Fatalf("SplitSlices(%d) ends at %d", n, next)
		}
	}
	if rs, _ := journal.SplitSlices(4); rs[1] != (journal.SliceRange{Min: 256, Max: 511}) {
		t.Fatalf("SplitSlices(4)[1] = %v, want [256, 511]", rs[1])
	}
	for _, n := range []int{0, -1, journal.NumberOfSlices + 1} {
		if _, err := journal.SplitSlices(n); !errors.Is(err, journal.ErrInvalidQuery) {
			t.Errorf("SplitSlices(%d) = %v, want ErrInvalidQuery", n, err)
		}
	}
}

func TestSliceRangeValidate(t *testing.T) {
	for _, r := range []journal.SliceRange{{-1, 3}, {0, journal.NumberOfSlices}, {5, 4}} {
		if err := r.Validate(); !errors.Is(err, journal.ErrInvalidQuery) {
			t.Errorf("%v.Validate() = %v, want ErrInvalidQuery", r, err)
		}
	}
	if err := journal.AllSlices.Validate(); err != nil {
		t.Error(err)
	}
	if r := (journal.SliceRange{3, 5}); !r.Contains(3) || !r.Contains(5) || r.Contains(2) || r.Contains(6) {
		t.Errorf("%v.Contains is wrong at its ends", r)
	}
}

func TestOffsetTextRoundTrip(t *testing.T) {
	for _, o := range []journal.Offset{
		{},
		{Kind: "memory", Pos: 17},
		{Kind: "postgres", Tx: 1<<63 + 5, Pos: 1<<62 + 3},
		{Kind: "postgres", Tx: 0, Pos: 1},
	} {
		b, err := o.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back journal.Offset
		if err := back.UnmarshalText(b); err != nil {
			t.Fatalf("UnmarshalText(%q): %v", b, err)
		}
		if back != o {
			t.Fatalf("%#v -> %q -> %#v", o, b, back)
		}
	}
	if s := (journal.Offset{Kind: "postgres", Tx: 7, Pos: 9}).String(); s != "postgres:7:9" {
		t.Fatalf("String = %q", s)
	}
	if o, err := journal.ParseOffset(""); err != nil || !o.IsStart() {
		t.Fatalf(`ParseOffset("") = %v, %v; want the start`, o, err)
	}
}

func TestOffsetMalformed(t *testing.T) {
	for _, s := range []string{"x", "memory:1", ":1:2", "memory:a:2", "memory:1:b", "memory:1:2:3", "memory:-1:2", "start:"} {
		var o journal.Offset
		err := o.UnmarshalText([]byte(s))
		if !errors.Is(err, journal.ErrOffsetMismatch) {
			t.Errorf("UnmarshalText(%q) = %v, want ErrOffsetMismatch", s, err)
		}
		if o != (journal.Offset{}) {
			t.Errorf("UnmarshalText(%q) changed the offset to %v", s, o)
		}
	}
}

func TestOffsetLess(t *testing.T) {
	a := journal.Offset{Kind: "postgres", Tx: 5, Pos: 100}
	b := journal.Offset{Kind: "postgres", Tx: 6, Pos: 1}
	c := journal.Offset{Kind: "postgres", Tx: 6, Pos: 2}
	if !a.Less(b) || !b.Less(c) || c.Less(a) || a.Less(a) {
		t.Fatal("Less does not order by Tx, then Pos")
	}
}
