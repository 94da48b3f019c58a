-- Histories no other can be taken for, and acknowledged events the stream no longer holds
-- recorded as lost (docs/architecture.md, "Positions across the server's history" and
-- "Nothing acknowledged is lost").
--
-- Histories. A history was known by its server's system identifier and WAL timeline, and a
-- new one took an offset 2^48 past the newest history it could see. Two histories forked
-- from the same copy (a second failover to a standby that never saw the first promotion,
-- a standby copied from a promoted primary before it wrote, one dump restored twice) saw
-- the same newest history, took the same offset and handed out the same positions for
-- different changes, so a token of one silently skipped changes of the other. Now each
-- history has an id no other shares, drawn at random when it registers, and sync tokens
-- carry it. A history's row is written in that history, so it is copied into every
-- history forked from it later and into none forked earlier: the table lists exactly the
-- histories the database in hand descends from. A token is served in its own history or
-- in one of its descendants, never in a sibling.
--
-- The database is part of what names a history: two databases of one server (a dump
-- restored beside the original) take transaction ids from one counter, interleaved.
alter table read_model_histories
    -- Drawn at random when the history registers; what sync tokens carry.
    add column history_id bigint,
    -- The database this history is written in (`pg_database.oid`); 0 for histories
    -- registered before this migration other than the one it runs in.
    add column database_oid oid not null default 0,
    -- The history this one was forked from: the newest registered when it registered.
    add column forked_from bigint;

-- 60 random bits, never 0 (a token that carries 0 carries no history).
create function read_model_new_history_id() returns bigint language sql volatile as $$
    select ('x' || substr(md5(gen_random_uuid()::text), 1, 15))::bit(60)::bigint + 1
$$;

update read_model_histories set history_id = read_model_new_history_id();
update read_model_histories as later set forked_from = (
    select earlier.history_id from read_model_histories as earlier
    where earlier.position_offset < later.position_offset
    order by earlier.position_offset desc limit 1
);
update read_model_histories set database_oid = (select oid from pg_database where datname = current_database())
where system_identifier = (pg_control_system()).system_identifier and timeline = read_model_timeline();

alter table read_model_histories
    alter column history_id set not null,
    add constraint read_model_histories_history_id_key unique (history_id),
    drop constraint read_model_histories_pkey,
    add primary key (system_identifier, timeline, database_oid);

-- The history this session writes in, (id, offset), registering it the first time any
-- session writes in it. Cached for the session under its process id and timeline, which
-- each call checks (a promoted standby's sessions live on into the new timeline).
create function read_model_history(out history_id bigint, out position_offset bigint)
language plpgsql volatile as $$
declare
    this_timeline integer := read_model_timeline();
    key text := pg_backend_pid()::text || '/' || this_timeline::text || '/';
    cached text := current_setting('lectern.history', true);
    this_system bigint;
    this_database oid;
    newest_id bigint;
    inserted integer;
begin
    if cached is not null and starts_with(cached, key) then
        position_offset := split_part(substr(cached, length(key) + 1), '/', 1)::bigint;
        history_id := split_part(substr(cached, length(key) + 1), '/', 2)::bigint;
        return;
    end if;
    this_system := (pg_control_system()).system_identifier;
    this_database := (select oid from pg_database where datname = current_database());
    select h.history_id, h.position_offset into history_id, position_offset from read_model_histories as h
    where h.system_identifier = this_system and h.timeline = this_timeline and h.database_oid = this_database;
    if history_id is null then
        -- One registration at a time; a second writer waits here, then finds the first's row.
        lock table read_model_histories in share row exclusive mode;
        select h.history_id, h.position_offset into history_id, position_offset from read_model_histories as h
        where h.system_identifier = this_system and h.timeline = this_timeline and h.database_oid = this_database;
    end if;
    if history_id is null then
        select case when count(*) = 0 then 0
                    else greatest(max(h.position_offset) + read_model_history_margin(),
                                  max(h.bound_served) + read_model_history_margin()
                                      - pg_current_xact_id()::text::bigint,
                                  0)
               end
        into position_offset from read_model_histories as h;
        select h.history_id into newest_id from read_model_histories as h order by h.position_offset desc limit 1;
        history_id := read_model_new_history_id();
        insert into read_model_histories
            (system_identifier, timeline, database_oid, history_id, forked_from, position_offset, bound_served)
        values (this_system, this_timeline, this_database, history_id, newest_id, position_offset,
                position_offset + pg_current_xact_id()::text::bigint)
        on conflict do nothing;
        get diagnostics inserted = row_count;
        if inserted = 0 then
            -- Another registered it, and this transaction's snapshot (repeatable read)
            -- cannot see its row: the transaction is retried, as after a serialization
            -- failure.
            raise exception 'the read model''s history (system %, timeline %) was registered concurrently',
                this_system, this_timeline using errcode = '40001';
        end if;
        raise log 'lectern: the read model is written in a new history % (system %, timeline %, forked from %): positions from % on',
            history_id, this_system, this_timeline, newest_id, position_offset;
    end if;
    perform set_config('lectern.history', key || position_offset::text || '/' || history_id::text, false);
end;
$$;

-- The offset of the history this session writes in (read_model_history), from the
-- session's cache without a second call when it is there: every write of the read model
-- computes its position through this.
create or replace function read_model_position_offset() returns bigint language plpgsql volatile as $$
declare
    cached text := current_setting('lectern.history', true);
    key text;
begin
    if cached is not null then
        key := pg_backend_pid()::text || '/' || read_model_timeline()::text || '/';
        if starts_with(cached, key) then
            return split_part(substr(cached, length(key) + 1), '/', 1)::bigint;
        end if;
    end if;
    return (select h.position_offset from read_model_history() as h);
end;
$$;

-- The history of the server this session is on, registering it on a primary (as its first
-- write would): null only on a standby, which writes nothing. What a process compares, when
-- it connects, with the history it knew; the session then names it in `lectern.history`,
-- which a read can return at no cost to say which history it read in.
create function read_model_server_history() returns bigint language plpgsql volatile as $$
begin
    if pg_is_in_recovery() then
        return null;
    end if;
    return (select h.history_id from read_model_history() as h);
end;
$$;

-- read_model_feed_bound, and the history the bound belongs to: a token carries it. The
-- bound's offset is the history's, from the same session's cache; the bound served is
-- recorded against the history's id (siblings share a server and a timeline).
create function read_model_feed_bound_in_history(record boolean default false, process text default 'lectern')
returns table (bound bigint, wal_position bigint, history_id bigint) language sql volatile as $$
    with history as (
        select h.history_id from read_model_history() as h
    ), sampled as (
        select b.bound, b.wal_position from read_model_feed_bound(false, process) as b
    ), recorded as (
        update read_model_histories as h set bound_served = greatest(h.bound_served, sampled.bound)
        from sampled, history where record and h.history_id = history.history_id
    )
    select sampled.bound, sampled.wal_position, history.history_id from sampled, history
$$;

-- A verify's result holds for the history it ran in; siblings share a system identifier
-- and a timeline, so the history's id is recorded too, and compared first.
alter table read_model_verifications add column history_id bigint default read_model_server_history();

-- Lost events. The ledger (..._stream_ledger.sql) recorded bare stream sequences, and an
-- acknowledged event the stream no longer held (aged out, purged, or of a stream deleted
-- and created again) was recorded as held when it could not be applied again: nothing said
-- it was lost, and a recreated stream's sequences were masked by the old stream's. Each
-- sequence now belongs to a stream, named by the time the stream was created
-- (nanoseconds since 1970, as JetStream reports it); what cannot be applied again is
-- recorded as lost until an operator accepts it.
alter table read_model_applied
    -- The stream the sequences are of; 0: the stream the ledger knew before this migration.
    add column stream bigint not null default 0;

alter table read_model_ledger
    -- The stream the ledger follows now (null until a projector first says which).
    add column stream bigint,
    -- Its consumer's acknowledgement floor when a projector last looked: what the ledger
    -- must hold of a stream that is gone.
    add column acknowledged_through bigint not null default 0 check (acknowledged_through >= 0);

create table read_model_lost (
    stream bigint not null,
    -- Acknowledged by JetStream, not held by the database, and not in the stream when
    -- they were to be applied again.
    sequences int8multirange not null,
    reason text not null,
    found_at timestamptz not null default now(),
    -- Set by `lectern-projector lost-events accept`: the operator republished them or
    -- accepted the loss; until then readiness is degraded.
    accepted_at timestamptz
);

do $$
begin
    execute format('alter function read_model_history() set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_position_offset() set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_server_history() set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_feed_bound_in_history(boolean, text) set search_path = %I, pg_catalog', current_schema());
end;
$$;
