-- Webhooks: an operator registers an endpoint for a workspace and some of its resources;
-- every `lectern-api serve` process may deliver, but one at a time per endpoint (a lease),
-- and a delivery says only "this workspace's contacts (or items) changed": the receiver
-- pulls the changes feed from its own token.

create table webhook_endpoints (
    id uuid primary key,
    workspace_id uuid not null,
    url text not null,
    resources text[] not null
        check (cardinality(resources) > 0 and resources <@ array['contacts', 'items']::text[]),
    enabled boolean not null default true,
    -- Who disabled it, and why: the operator, or deliveries that failed for too long.
    disabled_by text check (disabled_by in ('operator', 'failures')),
    disabled_reason text,
    check (enabled = (disabled_by is null)),
    -- The signing secret, sealed (ChaCha20-Poly1305: nonce, then ciphertext and tag)
    -- under a key derived from the key pepper whose fingerprint is beside it: never in
    -- clear, and useless without the pepper.
    secret_sealed bytea not null,
    -- The secret before the last rotation, which keeps signing beside the new one until
    -- `previous_secret_until`.
    previous_secret_sealed bytea,
    previous_secret_until timestamptz,
    pepper_fingerprint bytea not null check (octet_length(pepper_fingerprint) = 16),
    created_at timestamptz not null default now(),
    -- The process delivering for this endpoint, until when (renewed while it runs; once
    -- past, another process takes over).
    lease_owner uuid,
    lease_until timestamptz
);

create index webhook_endpoints_by_workspace on webhook_endpoints (workspace_id);

-- How far each endpoint has been told about each of its resources: the newest feed
-- transaction announced by a delivery that was answered 2xx.
create table webhook_announced (
    endpoint_id uuid not null references webhook_endpoints (id) on delete cascade,
    resource text not null check (resource in ('contacts', 'items')),
    through bigint not null,
    primary key (endpoint_id, resource)
);

create table webhook_deliveries (
    -- The `webhook-id` header: the same on every attempt of one delivery.
    id text primary key,
    endpoint_id uuid not null references webhook_endpoints (id) on delete cascade,
    resource text not null check (resource in ('contacts', 'items')),
    -- The newest feed transaction this delivery announces; raised while it is retried,
    -- since it carries no record: changes meanwhile ride on it.
    through bigint not null,
    -- When the first change it announces was seen (the payload's `timestamp`).
    created_at timestamptz not null default now(),
    state text not null default 'pending' check (state in ('pending', 'delivered', 'failed')),
    attempts integer not null default 0,
    next_attempt_at timestamptz not null default now(),
    -- Retries give up this long (three days by default) after the first attempt; a
    -- redelivery starts the count again.
    first_attempt_at timestamptz,
    last_attempt_at timestamptz,
    -- The receiver's status code of the last attempt, or null when none came back.
    last_status integer,
    last_error text,
    delivered_at timestamptz
);

-- Coalescing: at most one delivery waiting per endpoint and resource.
create unique index webhook_deliveries_one_pending on webhook_deliveries (endpoint_id, resource)
    where state = 'pending';
create index webhook_deliveries_log on webhook_deliveries (endpoint_id, created_at desc);
