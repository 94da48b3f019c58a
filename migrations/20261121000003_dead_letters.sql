-- Messages that break the change-event contract. Stored with their raw bytes and then
-- acknowledged, so they never block the stream; listed and retried by
-- `lectern-projector dead-letters`.
create table dead_letters (
    id bigserial primary key,
    subject text not null,
    -- JetStream stream sequence; unique so a redelivered poison message is kept once.
    stream_sequence bigint not null unique,
    payload bytea not null,
    reason text not null,
    received_at timestamptz not null default now()
);
