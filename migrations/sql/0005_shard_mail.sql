-- The region holding mail for a shard's next home
-- (sharding.Allocation.MailHeldBy): the region that stopped the shard
-- with mail still buffered. The fenced coordinator writes the row with the
-- deallocation and deletes it once the next home reports that the shard
-- started there, so that a successor, which reads it with the
-- allocations, also makes the next home wait for that mail (docs/DESIGN.md,
-- "Hand-over, not carry") when the coordinator that knew of it was cut off or
-- replaced first.
CREATE TABLE shard_mail_holders (
    type_name text   NOT NULL,
    shard_id  text   NOT NULL,
    region    text   NOT NULL,
    epoch     bigint NOT NULL,
    PRIMARY KEY (type_name, shard_id)
);
