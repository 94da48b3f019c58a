-- What each `lectern-projector verify` found, newest last: `status` prints the last one
-- and the projector exports it as metrics (docs/operations.md, "When the read model is
-- wrong").
create table read_model_verifications (
    id bigserial primary key,
    finished_at timestamptz not null default now(),
    -- Null: every workspace.
    workspace_id uuid,
    -- The verified history: the stream's events 1 to this sequence.
    through_sequence bigint not null,
    outcome text not null check (outcome in ('agreed', 'drifted', 'undecided')),
    records bigint not null,
    drifted bigint not null,
    reason text
);
