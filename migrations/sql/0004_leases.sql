-- Node leases (docs/DESIGN.md, "Leases and self-fencing"): one row per node
-- incarnation. A node acquires its lease before it hosts shards and renews
-- it; expires_at is on the database's clock. down is set when the coordinator
-- downs the incarnation (or it leaves): its renewals fail from then on, so it
-- fences itself, and its shards move once expires_at has passed. A row is
-- never revived: a restarted node is a new incarnation, with a row of its
-- own.
--
-- The coordinator lease of each entity type stays in coordinator_lease
-- (0003): its expires_at is now a real expiry, renewed by its holder.
CREATE TABLE node_leases (
    node_id     text        NOT NULL,
    incarnation bigint      NOT NULL CHECK (incarnation >= 0),
    expires_at  timestamptz NOT NULL,
    down        boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (node_id, incarnation)
);
