-- State shared by the sharding coordinators of a cluster.

-- The coordinator lease of each entity type. A coordinator acts only while
-- it holds the lease; taking it over increments epoch, the fencing token
-- every allocation is written with.
CREATE TABLE coordinator_lease (
    type_name  text        PRIMARY KEY,
    epoch      bigint      NOT NULL,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Where each shard lives, written under the coordinator epoch that decided it.
CREATE TABLE shard_allocations (
    type_name text   NOT NULL,
    shard_id  text   NOT NULL,
    region    text   NOT NULL,
    epoch     bigint NOT NULL,
    PRIMARY KEY (type_name, shard_id)
);

CREATE INDEX shard_allocations_region_idx ON shard_allocations (type_name, region);

-- Entities restarted when their shard starts (remember-entities).
CREATE TABLE remembered_entities (
    type_name text NOT NULL,
    shard_id  text NOT NULL,
    entity_id text NOT NULL,
    PRIMARY KEY (type_name, shard_id, entity_id)
);
