-- The read model: every contact and item Lectern has heard of, active or not.
-- Rows are written only by lectern-projector (and by hand in development);
-- lectern-api reads the active ones.

-- Trigram search that stays an index range scan per workspace needs GIN over
-- (workspace_id, trigrams): btree_gin supplies the uuid operator class.
create extension if not exists pg_trgm;
create extension if not exists btree_gin;

create table contacts (
    workspace_id uuid not null,
    id uuid not null,
    -- Highest event version applied; the projector's guard against older events.
    version bigint not null,
    -- Archived and deleted rows stay as tombstones so an older event cannot revive them.
    status text not null check (status in ('active', 'archived', 'deleted')),
    -- ICU root collation: the contract's human, case-insensitive-first name order,
    -- identical on every machine (libc collations differ between hosts).
    name text collate "und-x-icu",
    email text,
    phone text,
    address text,
    tin text,
    is_customer boolean,
    is_supplier boolean,
    created_at timestamptz,
    -- Lower-cased searchable fields joined by newlines: one trigram index serves
    -- the substring search over name, email, phone and tin.
    search_text text generated always as (
        lower((coalesce(name, '') || E'\n' || coalesce(email, '') || E'\n'
               || coalesce(phone, '') || E'\n' || coalesce(tin, '')) collate "und-x-icu")
    ) stored,
    primary key (workspace_id, id),
    -- An active row must be servable: every non-null field of the contract is present.
    constraint contacts_active_is_complete check (
        status <> 'active' or (
            name is not null and char_length(name) >= 1
            and is_customer is not null and is_supplier is not null
            and created_at is not null
        )
    )
);

-- listContacts, sort=createdAt: keyset range scan within one workspace.
create index contacts_by_created on contacts (workspace_id, created_at, id)
    where status = 'active';
-- listContacts, sort=name: keyset range scan in the column's ICU order.
create index contacts_by_name on contacts (workspace_id, name, id)
    where status = 'active';
-- listContacts, search: trigram match restricted to one workspace inside the index,
-- so a small workspace never pays for the large ones.
create index contacts_search on contacts using gin (workspace_id, search_text gin_trgm_ops)
    where status = 'active';

create table items (
    workspace_id uuid not null,
    id uuid not null,
    version bigint not null,
    status text not null check (status in ('active', 'archived', 'deleted')),
    name text collate "und-x-icu",
    sku text,
    description text,
    type text check (type in ('product', 'service')),
    unit text,
    -- Money is exact: numeric amounts, ISO 4217 codes; never floats.
    sale_price_amount numeric,
    sale_price_currency text check (sale_price_currency ~ '^[A-Z]{3}$'),
    purchase_price_amount numeric,
    purchase_price_currency text check (purchase_price_currency ~ '^[A-Z]{3}$'),
    created_at timestamptz,
    search_text text generated always as (
        lower((coalesce(name, '') || E'\n' || coalesce(sku, '') || E'\n'
               || coalesce(description, '')) collate "und-x-icu")
    ) stored,
    primary key (workspace_id, id),
    constraint items_active_is_complete check (
        status <> 'active' or (
            name is not null and char_length(name) >= 1
            and type is not null and created_at is not null
        )
    ),
    -- A price is either absent or both amount and currency.
    constraint items_sale_price_whole check ((sale_price_amount is null) = (sale_price_currency is null)),
    constraint items_purchase_price_whole check ((purchase_price_amount is null) = (purchase_price_currency is null))
);

create index items_by_created on items (workspace_id, created_at, id) where status = 'active';
create index items_by_name on items (workspace_id, name, id) where status = 'active';
create index items_search on items using gin (workspace_id, search_text gin_trgm_ops)
    where status = 'active';
