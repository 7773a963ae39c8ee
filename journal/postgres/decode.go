package postgres

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/journal"
)

// Replay spends most of its time turning rows into events, so decodePage
// reads the binary column values itself instead of going through Scan, lets
// the payloads of a page share a few large allocations (each payload capped
// to its own length, so appending to one never touches another), and shares
// the strings of repeated manifests and writer ids.

const arenaChunk = 64 << 10

// pageCopier copies a page's values out of pgx's row buffers, which the
// next row overwrites: strings interned (a page repeats its manifests,
// writer ids and, for queries, persistence ids and entity types), payloads
// carved from shared arenas.
type pageCopier struct {
	arena   []byte
	strs    map[string]string
	maxStrs int
}

func newPageCopier(maxStrs int) *pageCopier {
	return &pageCopier{strs: map[string]string{}, maxStrs: maxStrs}
}

func (c *pageCopier) intern(b []byte) string {
	if s, ok := c.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(c.strs) < c.maxStrs {
		c.strs[s] = s
	}
	return s
}

// payload copies p into the arena, or alone when it is large.
func (c *pageCopier) payload(p []byte) []byte {
	if len(p) > arenaChunk/4 {
		return append([]byte(nil), p...)
	}
	if len(c.arena) < len(p) {
		c.arena = make([]byte, arenaChunk)
	}
	n := copy(c.arena, p)
	out := c.arena[:n:n]
	c.arena = c.arena[n:]
	return out
}

// postgresEpoch is 2000-01-01 UTC in microseconds since the Unix epoch: the
// origin of binary timestamptz values.
const postgresEpoch = 946_684_800_000_000

func decodePage(rows pgx.Rows, pid string, size int) ([]journal.Event, error) {
	fds := rows.FieldDescriptions()
	fast := len(fds) == 7
	for _, i := range []int{0, 1, 2, 4} { // int8, int8, timestamptz, bytea
		fast = fast && fds[i].Format == pgx.BinaryFormatCode
	}
	evs := make([]journal.Event, 0, min(size, 256))
	if !fast {
		for rows.Next() {
			e := journal.Event{PersistenceID: pid}
			var seq int64
			if err := rows.Scan(&seq, &e.Ordering, &e.Timestamp, &e.Manifest, &e.Payload, &e.Tags, &e.WriterID); err != nil {
				return nil, err
			}
			e.SeqNr = uint64(seq)
			evs = append(evs, e)
		}
		return evs, rows.Err()
	}
	typeMap := rows.Conn().TypeMap()
	c := newPageCopier(1024)
	intern := c.intern
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw[0]) != 8 || len(raw[1]) != 8 || len(raw[2]) != 8 || raw[4] == nil {
			return nil, fmt.Errorf("unexpected row shape")
		}
		e := journal.Event{
			PersistenceID: pid,
			SeqNr:         binary.BigEndian.Uint64(raw[0]),
			Ordering:      int64(binary.BigEndian.Uint64(raw[1])),
			Timestamp:     time.UnixMicro(int64(binary.BigEndian.Uint64(raw[2])) + postgresEpoch),
			Manifest:      intern(raw[3]),
			WriterID:      intern(raw[6]),
		}
		e.Payload = c.payload(raw[4])
		if raw[5] != nil {
			if err := typeMap.Scan(fds[5].DataTypeOID, fds[5].Format, raw[5], &e.Tags); err != nil {
				return nil, fmt.Errorf("tags of seq %d: %w", e.SeqNr, err)
			}
		}
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

// decodeQueryPage is decodePage for the rows of a query (queryColumns),
// whose persistence ids vary.
func decodeQueryPage(rows pgx.Rows, size int) ([]journal.QueriedEvent, error) {
	fds := rows.FieldDescriptions()
	fast := len(fds) == 11
	for _, i := range []int{1, 2, 3, 5, 9, 10} { // int8, int8, timestamptz, bytea, int2, int8
		fast = fast && fds[i].Format == pgx.BinaryFormatCode
	}
	out := make([]journal.QueriedEvent, 0, min(size, 256))
	if !fast {
		for rows.Next() {
			var e journal.QueriedEvent
			var seq, tx int64
			var slice int16
			if err := rows.Scan(&e.PersistenceID, &seq, &e.Ordering, &e.Timestamp, &e.Manifest, &e.Payload, &e.Tags, &e.WriterID, &e.EntityType, &slice, &tx); err != nil {
				return nil, err
			}
			e.SeqNr, e.Slice = uint64(seq), int(slice)
			e.Offset = journal.Offset{Kind: queryKind, Tx: uint64(tx), Pos: e.Ordering}
			out = append(out, e)
		}
		return out, rows.Err()
	}
	typeMap := rows.Conn().TypeMap()
	c := newPageCopier(4096)
	intern := c.intern
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw[1]) != 8 || len(raw[2]) != 8 || len(raw[3]) != 8 || raw[5] == nil || len(raw[9]) != 2 || len(raw[10]) != 8 {
			return nil, fmt.Errorf("unexpected row shape")
		}
		ordering := int64(binary.BigEndian.Uint64(raw[2]))
		e := journal.QueriedEvent{
			Event: journal.Event{
				PersistenceID: intern(raw[0]),
				SeqNr:         binary.BigEndian.Uint64(raw[1]),
				Ordering:      ordering,
				Timestamp:     time.UnixMicro(int64(binary.BigEndian.Uint64(raw[3])) + postgresEpoch),
				Manifest:      intern(raw[4]),
				WriterID:      intern(raw[7]),
			},
			EntityType: intern(raw[8]),
			Slice:      int(int16(binary.BigEndian.Uint16(raw[9]))),
			Offset:     journal.Offset{Kind: queryKind, Tx: binary.BigEndian.Uint64(raw[10]), Pos: ordering},
		}
		e.Payload = c.payload(raw[5])
		if raw[6] != nil {
			if err := typeMap.Scan(fds[6].DataTypeOID, fds[6].Format, raw[6], &e.Tags); err != nil {
				return nil, fmt.Errorf("tags of %s seq %d: %w", e.PersistenceID, e.SeqNr, err)
			}
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
