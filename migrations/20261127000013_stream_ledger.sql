-- Which of the `CHANGES` stream's events the read model holds, recorded by PostgreSQL in
-- the same transaction as the rows they wrote, as a sink connector keeps its offsets in
-- the sink (docs/architecture.md, "Nothing acknowledged is lost"). JetStream's
-- acknowledgements say what the projectors applied on the server they wrote to; this says
-- what the database in hand holds. When a crash, a failover or a restore made the database
-- forget commits JetStream saw acknowledged, the projector finds the sequences acknowledged
-- but not recorded here and applies them again, by itself.

-- Stream sequences applied: each batch inserts the sequences it applied (dead letters
-- included: they are stored), and the projectors fold the rows into one now and then.
create table read_model_applied (
    sequences int8multirange not null
);

-- When the ledger began. A database that already held a read model when the ledger was
-- added (an upgrade) takes JetStream's acknowledgements at their word once, when a projector
-- first starts on it: the sequences up to the consumer's acknowledgement floor then are
-- recorded as applied. A database that held nothing takes nothing at its word. One row.
create table read_model_ledger (
    only_one boolean primary key default true check (only_one),
    started_at timestamptz not null default now(),
    -- The acknowledgement floor taken at its word: 0 for none (the database was empty),
    -- null until the first projector takes it.
    trusted_through bigint check (trusted_through >= 0)
);

insert into read_model_ledger (trusted_through)
select case when exists (select from contacts) or exists (select from items) then null else 0 end;
