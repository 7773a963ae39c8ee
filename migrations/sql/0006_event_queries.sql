-- The read side (docs/DESIGN.md, "The read side"): each event row carries
-- its entity type, its slice and the id of the transaction that wrote it,
-- so events can be read back by slice range or tag, in commit order,
-- without gaps.
--
--   entity_type  the part of persistence_id before the first '|', '' when
--                there is none (journal.EntityTypeOf).
--   slice        ('x' || substr(md5(persistence_id), 1, 4))::bit(16)::int
--                % 1024: the first two bytes of the MD5 digest, big-endian,
--                mod 1024 (journal.SliceOf; a test checks that both agree).
--                The journal computes both on every insert: no default.
--   tx_id        pg_current_xact_id() of the writing transaction, by
--                default, so every insert path records it. A query hands out
--                a row only when tx_id < pg_snapshot_xmin(pg_current_snapshot())
--                in the same statement: no transaction that could still
--                commit a row sorting before it is open. Rows written before
--                this migration get tx_id 0, below every real transaction id
--                (those start at 3), so they come first, by ordering.
--
-- Locking. Apply runs all pending migrations in one transaction, so every
-- lock taken here is held until it commits: splitting the backfill into
-- batches would release nothing. What keeps the lock short is doing the
-- least work: the columns are added with constant defaults (metadata only,
-- no rewrite), then one ALTER ... TYPE ... USING computes entity_type and
-- slice from persistence_id in a single rewrite of the table, which writes
-- each row once, leaves no dead tuples and rebuilds the indexes in bulk (an
-- UPDATE would write every row a second time, leave as many dead tuples and
-- insert into every index row by row). Reads and writes of event_journal
-- wait for the rewrite and the two index builds, which take time in
-- proportion to the table: 22 s for a million 200-byte events on the test
-- container of a 2-core machine under heavy load (load average 16); plan
-- the upgrade of a large journal for that pause. The volatile default of tx_id is set only
-- after the rewrite, so old rows keep 0 (a volatile default on ADD COLUMN
-- would itself force a rewrite).
ALTER TABLE event_journal
    ADD COLUMN entity_type text     NOT NULL DEFAULT '',
    ADD COLUMN slice       smallint NOT NULL DEFAULT 0,
    ADD COLUMN tx_id       xid8     NOT NULL DEFAULT '0';

ALTER TABLE event_journal
    ALTER COLUMN entity_type TYPE text USING (
        CASE WHEN strpos(persistence_id, '|') > 0
             THEN split_part(persistence_id, '|', 1) ELSE '' END),
    ALTER COLUMN slice TYPE smallint USING (
        (('x' || substr(md5(persistence_id), 1, 4))::bit(16)::int % 1024)::smallint),
    ADD CONSTRAINT event_journal_slice_range CHECK (slice >= 0 AND slice < 1024);

ALTER TABLE event_journal
    ALTER COLUMN entity_type DROP DEFAULT,
    ALTER COLUMN slice DROP DEFAULT,
    ALTER COLUMN tx_id SET DEFAULT pg_current_xact_id();

-- Events by slice range: one entity type's rows in (tx_id, ordering) order,
-- the query's sort order and its offset, so a page is an ordered index range
-- scan that stops at its limit; slice is the last key column so rows outside
-- the range are skipped in the index without visiting the table. (Slice
-- before tx_id would make every page of a range wider than one slice scan
-- and sort all of the range's later rows.)
CREATE INDEX event_journal_slices_idx ON event_journal (entity_type, tx_id, ordering, slice);

-- Events by tag: a GIN index on the tags array, partial so that untagged
-- events (most of them) cost nothing on the write path. A page finds the
-- tag's rows after its offset through the index and sorts them.
CREATE INDEX event_journal_tags_idx ON event_journal USING gin (tags) WHERE cardinality(tags) > 0;
