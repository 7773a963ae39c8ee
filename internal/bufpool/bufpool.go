// Package bufpool recycles the byte buffers a message is encoded into and
// copied out of, so that sending a message allocates no buffer of its own.
package bufpool

import "sync"

const (
	// initialCap is a new buffer's capacity: most messages fit.
	initialCap = 256
	// maxKept is the largest buffer kept for reuse: a rare large message
	// does not leave a large buffer in the pool.
	maxKept = 16 << 10
)

// Pool holds buffers for reuse. The zero value is ready; it is safe for
// concurrent use. Its buffers go, as a sync.Pool's do, when the garbage
// collector runs, so an idle Pool keeps none.
type Pool struct{ p sync.Pool }

// Get returns an empty buffer.
func (p *Pool) Get() *[]byte {
	if b, ok := p.p.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, initialCap)
	return &b
}

// Put hands back b, which nothing refers to any more, emptied; a nil b or
// one grown past maxKept is let go.
func (p *Pool) Put(b *[]byte) {
	if b != nil && cap(*b) <= maxKept {
		*b = (*b)[:0]
		p.p.Put(b)
	}
}
