-- Operating projections from any node (docs/DESIGN.md, "The read side"):
-- the holder of an instance stores a report at each lease renewal (its
-- handled offset, last event time, lag in events, last error), and any
-- node queues operations for the holder in projection_requests, which the
-- holder applies and then deletes with a write fenced by its epoch.
ALTER TABLE projection_offsets
    ADD COLUMN report_offset     text,
    ADD COLUMN report_last_event timestamptz,
    ADD COLUMN report_lag_events bigint,
    ADD COLUMN report_error      text,
    ADD COLUMN reported_at       timestamptz;

CREATE TABLE projection_requests (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    projection_name text        NOT NULL,
    instance_key    text        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('pause', 'resume', 'reset', 'rebuild')),
    "offset"        text        NOT NULL DEFAULT 'start',
    requested_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    FOREIGN KEY (projection_name, instance_key) REFERENCES projection_offsets ON DELETE CASCADE
);

CREATE INDEX projection_requests_instance_idx ON projection_requests (projection_name, instance_key, id);
