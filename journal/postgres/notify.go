package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Live queries wait for new events without polling the table: a write of
// this journal wakes them in process (written), and writes of other
// processes through LISTEN/NOTIFY. After each batch the journal asks its
// notifier goroutine for a NOTIFY; the notifier sends one at a time, so the
// requests of all batches committed while one is in flight coalesce into
// the next. The NOTIFY is its own transaction, after the batch's commit,
// with synchronous_commit off: a NOTIFY in the batch's transaction would
// hold PostgreSQL's cluster-wide notify lock across the batch's WAL flush,
// serializing the commits of concurrent batches; this way a batch pays
// nothing and the wake-up costs one small round trip per notify, not per
// batch. One listener connection per journal, opened by the first Live
// query and kept until Close, fans notifications out to every live query
// of the process; it ignores the journal's own (they woke its queries
// already).
//
// The channel is per schema, so journals on other schemas of the database
// do not wake each other.
const channelSQL = `'shoal_journal_' || left(md5(current_schema()), 16)`

type wakeups struct {
	pool *pgxpool.Pool
	id   string // payload of this journal's notifications

	mu     sync.Mutex
	wake   chan struct{} // closed and replaced by every wake-up
	closed bool          // no more goroutines start

	notify     chan struct{} // capacity 1: a NOTIFY is wanted
	listenOnce sync.Once
	ctx        context.Context // ends at Close
	cancel     context.CancelFunc
	bg         sync.WaitGroup
}

func (w *wakeups) init(pool *pgxpool.Pool) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	w.pool, w.id = pool, hex.EncodeToString(b[:])
	w.wake = make(chan struct{})
	w.notify = make(chan struct{}, 1)
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.bg.Add(1)
	go w.notifier()
}

func (w *wakeups) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.bg.Wait()
}

// waiter returns a channel closed by the next wake-up. Take it before
// looking for events, so a write in between is not missed.
func (w *wakeups) waiter() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wake
}

func (w *wakeups) signal() {
	w.mu.Lock()
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
}

// written wakes this process's live queries and asks for a NOTIFY for the
// others.
func (w *wakeups) written() {
	w.signal()
	select {
	case w.notify <- struct{}{}:
	default: // one is pending already: it covers this batch too
	}
}

func (w *wakeups) notifier() {
	defer w.bg.Done()
	for {
		select {
		case <-w.notify:
		case <-w.ctx.Done():
			return
		}
		// A failed NOTIFY loses nothing: the other processes' live
		// queries poll.
		_, _ = w.pool.Exec(w.ctx, `SELECT set_config('synchronous_commit', 'off', true), pg_notify(`+channelSQL+`, $1)`, w.id)
	}
}

// listen starts the listener once.
func (w *wakeups) listen(retry time.Duration) {
	w.listenOnce.Do(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.closed {
			return
		}
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			for {
				_ = w.listenOn()
				select {
				case <-w.ctx.Done():
					return
				case <-time.After(retry):
				}
			}
		}()
	})
}

// listenOn holds one listening connection until it fails or Close.
func (w *wakeups) listenOn() error {
	conn, err := pgx.ConnectConfig(w.ctx, w.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(ctx)
	}()
	var channel string
	if err := conn.QueryRow(w.ctx, `SELECT `+channelSQL).Scan(&channel); err != nil {
		return err
	}
	if _, err := conn.Exec(w.ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	w.signal() // events may have been written while nobody listened
	for {
		n, err := conn.WaitForNotification(w.ctx)
		if err != nil {
			return err
		}
		if n.Payload != w.id {
			w.signal()
		}
	}
}
