package tcp

import (
	"sync/atomic"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
)

// delivery hands an inbound connection's messages to the handler in the
// order they arrived. A connection's reader reads frames and decodes those
// its codec decodes; while its link is quiet it also hands each message
// over itself, at once, with no goroutine between the socket and the
// handler (an ask's round trip pays for no hand-off). Once frames arrive
// faster than one goroutine both reads and handles them, that is, when the
// reader finds the next frames already read while the handler has
// messages not yet handled, it passes batches to the connection's
// deliverer goroutine and reads the next batch while the deliverer hands
// over the last (an encoded handler decodes there): the two halves of the
// receiving work run on two cores (docs/DESIGN.md, "Transport").
//
// The bodies of a batch's small frames lie in a block the batch lends the
// frame reader (frame.Reader.UseBlock), and the block is reused with the
// batch once the batch is handed over: an encoded handler keeps nothing
// of a payload past its call (cluster.EncodedHandler), so a stream of
// frames leaves no garbage behind. A batch with a message decoded for the
// plain Handler keeps its block to that message instead, for a codec may
// decode values that share the payload's memory (docs/DESIGN.md,
// "Transport").
//
// Order holds because the reader hands over inline only when the
// deliverer has nothing left (pending is 0, and only the reader adds to
// it). Across connections, every message is handed over under the
// transport's deliverMu after checking that its connection is still its
// sender's current one: a newer connection marks the older superseded
// before it reads its first frame, so nothing of the older one is handled
// after the newer one's first message.
type delivery struct {
	t      *Transport
	c      *inConn
	frames *frame.Reader
	// batch collects what was read and not yet handed over.
	batch *batch
	// pending counts batches passed to the deliverer and not yet handled.
	pending atomic.Int32
	batches chan *batch
	free    chan *batch
	done    chan struct{}
	// stopped is set by whichever goroutine found the connection no
	// longer current, or the transport closed: nothing more is handed over.
	stopped atomic.Bool
}

// inbound is one item of a connection's stream: a decoded message, a
// message for the handler of its manifest to decode (encoded and its
// payload, see Transport.HandleEncoded), or a flush request (flush set,
// its id the payload) answered once every message before it was handed
// over.
type inbound struct {
	msg     any
	encoded cluster.EncodedHandler
	payload []byte
	flush   bool
}

// batch is a run of items read, and the block the bodies of their small
// frames were cut from.
type batch struct {
	items []inbound
	block []byte
	// kept: an item's decoded message may share the block's memory, so
	// the block is left to it and the batch takes a new one.
	kept bool
}

const (
	batchSize     = 128 // messages per batch passed to the deliverer
	batchesQueued = 4   // batches the reader may be ahead of the deliverer
	// batchBlock is the size of a batch's block: a batch is handed over
	// once its block has no room for one more small body, so a full
	// batch of the typical small frames fits.
	batchBlock = 16 << 10
)

func newDelivery(t *Transport, c *inConn, frames *frame.Reader) *delivery {
	d := &delivery{t: t, c: c, frames: frames, batch: newBatch()}
	frames.UseBlock(d.batch.block)
	return d
}

func newBatch() *batch {
	return &batch{items: make([]inbound, 0, batchSize), block: make([]byte, batchBlock)}
}

// keep marks the batch being read as holding a message that may share its
// block's memory; the reader calls it for each message it decodes itself.
func (d *delivery) keep() { d.batch.kept = true }

// add takes the next item read; more says the frames after it are
// already read. False means stop reading the connection.
func (d *delivery) add(item inbound, more bool) bool {
	b := d.batch
	b.items = append(b.items, item)
	if more && len(b.items) < batchSize && d.frames.Room() >= frame.BlockMax {
		return true // decode on: the batch is handed over in one go
	}
	if d.pending.Load() == 0 && !more {
		ok := d.handOver(b.items)
		b.reset()
		d.frames.UseBlock(b.block)
		return ok
	}
	if d.batches == nil {
		d.start()
	}
	if d.stopped.Load() {
		return false
	}
	d.pending.Add(1)
	d.batches <- b
	d.batch = <-d.free
	d.frames.UseBlock(d.batch.block)
	return true
}

// reset empties b for reuse, with a new block if its own was kept.
func (b *batch) reset() {
	clear(b.items)
	b.items = b.items[:0]
	if b.kept {
		b.block, b.kept = make([]byte, batchBlock), false
	}
}

// start starts the deliverer, the first time the reader is ahead.
func (d *delivery) start() {
	d.batches = make(chan *batch, batchesQueued)
	d.free = make(chan *batch, batchesQueued+1)
	for range batchesQueued + 1 {
		d.free <- newBatch()
	}
	d.done = make(chan struct{})
	go d.deliver()
}

// deliver is the deliverer: it hands over the batches in order, and
// drops them once stopped, so that the reader never waits on it for long.
// A batch goes back to the reader, block and all, only once handed over
// or dropped: the reader never writes a body the handler may still read.
func (d *delivery) deliver() {
	defer close(d.done)
	for b := range d.batches {
		if !d.stopped.Load() && !d.handOver(b.items) {
			// The reader may be waiting for the next frame: end it.
			d.c.conn.Close()
		}
		b.reset()
		d.free <- b
		d.pending.Add(-1)
	}
}

// handOver hands batch to the handler and answers its flushes, unless
// the connection is no longer current or the transport closed; false
// then, and the connection's delivery is stopped.
func (d *delivery) handOver(batch []inbound) bool {
	for len(batch) > 0 {
		n := 0
		for n < len(batch) && !batch[n].flush {
			n++
		}
		if n > 0 && !d.handle(batch[:n]) {
			return false
		}
		if n == len(batch) {
			break
		}
		// Written outside deliverMu: a peer slow to read its answer
		// holds up only its own connection.
		if !d.t.isCurrent(d.c) || !d.acknowledge(batch[n].payload) {
			d.stopped.Store(true)
			return false
		}
		batch = batch[n+1:]
	}
	return true
}

// handle hands msgs to the handler under deliverMu, each after checking
// that the connection is still current and the transport open: a swap
// while the handler runs stops the rest of the batch. The messages handed
// over are counted once, when it returns: one atomic add per run of
// messages rather than per message.
func (d *delivery) handle(msgs []inbound) bool {
	t := d.t
	var delivered uint64
	t.deliverMu.Lock()
	defer func() {
		t.deliverMu.Unlock()
		t.stat.delivered.Add(delivered)
	}()
	from := d.c.from
	for i := range msgs {
		if t.ctx.Err() != nil || !t.isCurrent(d.c) {
			d.stopped.Store(true)
			return false
		}
		if err := t.handOne(from, &msgs[i]); err != nil {
			t.badFrame(d.c, err) // it did not decode
			continue
		}
		delivered++
	}
	return true
}

// message is the item of a message frame of manifest and payload: for
// the manifest's EncodedHandler, which decodes it as it is handed over,
// or decoded by the codec for the Handler.
func (t *Transport) message(handlers *encodedHandlers, manifest string, payload []byte) (inbound, error) {
	if h := handlers.get(t, manifest); h != nil {
		return inbound{encoded: h, payload: payload}, nil
	}
	msg, err := t.cfg.Codec.Decode(manifest, payload)
	return inbound{msg: msg}, err
}

// handOne hands m to its handler; an error is a payload its
// EncodedHandler could not decode. deliverMu is held.
func (t *Transport) handOne(from cluster.UniqueAddress, m *inbound) error {
	if m.encoded != nil {
		return m.encoded(from, m.payload)
	}
	t.cfg.Handler(from, m.msg)
	return nil
}

// acknowledge answers a flush: every message before it was handed over.
func (d *delivery) acknowledge(id []byte) bool {
	ack := frame.Frame{From: d.t.cfg.Self, To: d.c.from, Manifest: flushAckManifest, Payload: id}
	d.c.wmu.Lock() // after any frame written back, whole
	defer d.c.wmu.Unlock()
	d.c.conn.SetWriteDeadline(time.Now().Add(d.t.cfg.WriteTimeout))
	return frame.WriteFrame(d.c.conn, ack, controlMaxSize) == nil
}

// close ends the deliverer, once what was passed to it is handed over or
// dropped; the reader calls it when it stops reading.
func (d *delivery) close() {
	if d.batches != nil {
		close(d.batches)
		<-d.done
	}
}
