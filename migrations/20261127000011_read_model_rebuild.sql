-- A `lectern-projector rebuild` under way: the stream sequence through which its shadow
-- tables (`rebuild_contacts`, `rebuild_items`, created and dropped by the rebuild) hold
-- the stream's events. Written in the same transaction as each batch, so a rebuild
-- killed at any point resumes from exactly there (docs/operations.md, "When the read
-- model is wrong"). At most one row.
create table read_model_rebuild (
    only_one boolean primary key default true check (only_one),
    started_at timestamptz not null default now(),
    through_sequence bigint not null default 0
);
