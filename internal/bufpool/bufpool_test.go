package bufpool

import "testing"

func TestGetIsEmptyAndPutEmpties(t *testing.T) {
	var p Pool
	b := p.Get()
	if len(*b) != 0 || cap(*b) < initialCap {
		t.Fatalf("new buffer: len %d cap %d, want empty with room for %d", len(*b), cap(*b), initialCap)
	}
	*b = append(*b, "frame"...)
	p.Put(b)
	if len(*b) != 0 {
		t.Fatalf("a buffer handed back keeps %d bytes", len(*b))
	}
	p.Put(nil) // let go, no panic
	if got := p.Get(); len(*got) != 0 {
		t.Fatalf("Get after Put: %d bytes, want empty", len(*got))
	}
}
