-- API keys. The key itself is never stored: only HMAC-SHA256(secret) under the
-- server-side pepper, so a database leak yields nothing usable.
create table api_keys (
    -- The public part of the key (lk_<env>_<id>_<secret>); indexes the key.
    id text primary key check (id ~ '^[0-9A-Za-z]{16,64}$'),
    workspace_id uuid not null,
    name text,
    scopes text[] not null check (scopes <@ array['contacts:read', 'items:read']::text[]),
    environment text not null check (environment in ('live', 'test')),
    secret_hmac bytea not null check (octet_length(secret_hmac) = 32),
    created_at timestamptz not null default now(),
    expires_at timestamptz,
    revoked_at timestamptz,
    -- Flushed in batches by the API in the background, never on the request path.
    last_used_at timestamptz
);

-- keys list --workspace
create index api_keys_by_workspace on api_keys (workspace_id, created_at);

-- Every API process caches verified keys; this notification evicts a key
-- everywhere at commit, which is how revocation reaches all processes within a second.
-- last_used_at is deliberately not in the column list: its batched flushes must
-- not empty the caches.
create function api_keys_notify_change() returns trigger language plpgsql as $$
begin
    perform pg_notify('lectern_api_keys', coalesce(new.id, old.id));
    return null;
end;
$$;

create trigger api_keys_changed
    after insert or delete or update of workspace_id, scopes, environment, secret_hmac, expires_at, revoked_at
    on api_keys
    for each row execute function api_keys_notify_change();
