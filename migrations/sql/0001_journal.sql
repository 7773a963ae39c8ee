-- The event journal: one row per event, unique per (persistence_id, seq_nr).
-- The primary key is what enforces a single writer per persistence id.
CREATE TABLE event_journal (
    persistence_id  text        NOT NULL,
    seq_nr          bigint      NOT NULL CHECK (seq_nr > 0),
    -- Journal-wide position, assigned on insert; increases with write order
    -- (with gaps) and is the cursor for future event queries.
    ordering        bigint      GENERATED ALWAYS AS IDENTITY,
    -- The writer's clock at persist time (journal.Event.Timestamp).
    write_timestamp timestamptz NOT NULL,
    manifest        text        NOT NULL,
    payload         bytea       NOT NULL,
    tags            text[]      NOT NULL DEFAULT '{}',
    writer_id       text        NOT NULL,
    PRIMARY KEY (persistence_id, seq_nr)
);

CREATE UNIQUE INDEX event_journal_ordering_idx ON event_journal (ordering);

-- How far DeleteTo has removed each persistence id's events: the highest
-- deleted seq nr. HighestSeqNr is the greater of this and the highest stored
-- event, so it survives deletion, and a write at or below it is a conflict
-- (a stale incarnation cannot reuse deleted sequence numbers).
CREATE TABLE event_journal_deleted (
    persistence_id text   PRIMARY KEY,
    deleted_to     bigint NOT NULL
);
