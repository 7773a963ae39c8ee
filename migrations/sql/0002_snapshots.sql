-- Snapshots: serialized state at a sequence number. Saving the same
-- (persistence_id, seq_nr) again replaces it.
CREATE TABLE snapshots (
    persistence_id  text        NOT NULL,
    seq_nr          bigint      NOT NULL,
    write_timestamp timestamptz NOT NULL,
    manifest        text        NOT NULL,
    payload         bytea       NOT NULL,
    PRIMARY KEY (persistence_id, seq_nr)
);
