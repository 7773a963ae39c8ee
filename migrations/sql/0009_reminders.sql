-- Durable reminders (docs/DESIGN.md, "Durable reminders"): one row per
-- (entity type, entity id, name). An effect's changes go in in the
-- transaction that stores its events (journal/postgres.WithSideStore).
--
-- due_at is on the database's clock: a relative delay is resolved with
-- clock_timestamp() when the row is written, and the firing node compares
-- it with the database's time. generation is the delivery id: it changes
-- whenever the reminder is set again or advanced, and an acknowledgement
-- changes the row only while it still names it.
CREATE TABLE reminders (
    entity_type text        NOT NULL,
    entity_id   text        NOT NULL,
    name        text        NOT NULL,
    shard_id    text        NOT NULL,
    due_at      timestamptz NOT NULL,
    period_us   bigint      NOT NULL DEFAULT 0 CHECK (period_us >= 0),
    manifest    text        NOT NULL,
    payload     bytea       NOT NULL,
    generation  bigint      NOT NULL,
    PRIMARY KEY (entity_type, entity_id, name)
);

-- "Due soon in these shards": the firing node loads, per entity type, the
-- reminders of the shards it hosts due within its window, earliest first.
CREATE INDEX reminders_due_idx ON reminders (entity_type, shard_id, due_at);
