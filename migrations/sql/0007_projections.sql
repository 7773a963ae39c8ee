-- Projections (docs/DESIGN.md, "The read side"): one row per projection
-- instance (a projection name and a slice range, instance_key
-- "name/min-max"), holding the offset it has handled up to and its lease.
--
-- The lease fences offsets: an instance takes the row by incrementing epoch
-- (refused while another holder's expires_at, on the database's clock, is
-- still ahead), and every later write of the row names that epoch, so a
-- holder that lost the row cannot move the offset. An exactly-once
-- handler's writes commit in the transaction that moves the offset.
-- paused survives restarts: a paused instance starts paused.
CREATE TABLE projection_offsets (
    projection_name text        NOT NULL,
    instance_key    text        NOT NULL,
    "offset"        text        NOT NULL DEFAULT 'start',
    epoch           bigint      NOT NULL CHECK (epoch >= 0),
    holder          text        NOT NULL,
    expires_at      timestamptz NOT NULL,
    paused          boolean     NOT NULL DEFAULT false,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection_name, instance_key)
);

-- Events a projection's policy set aside (the dead-letter policy): written
-- in the transaction that moves the instance's offset past them. payload is
-- the stored event as the journal holds it, so an event whose manifest is
-- unknown can be decoded and handled again later.
CREATE TABLE projection_dead_letters (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    projection_name text        NOT NULL,
    instance_key    text        NOT NULL,
    persistence_id  text        NOT NULL,
    seq_nr          bigint      NOT NULL,
    manifest        text        NOT NULL,
    payload         bytea       NOT NULL,
    error           text        NOT NULL,
    "offset"        text        NOT NULL,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX projection_dead_letters_instance_idx ON projection_dead_letters (projection_name, instance_key, id);

-- One row per event and instance: an event set aside again (after a reset,
-- or a save retried after its commit's acknowledgement was lost) updates
-- its row with the latest error.
CREATE UNIQUE INDEX projection_dead_letters_event_idx ON projection_dead_letters (projection_name, instance_key, persistence_id, seq_nr);
