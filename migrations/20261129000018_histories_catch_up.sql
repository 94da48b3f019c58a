-- A history forked from another takes back what it lacks before anything else is applied
-- to it (docs/architecture.md, "Positions across the server's history").
--
-- After a failover to a standby that missed the last commits, or a restore, the database
-- lacks events JetStream saw acknowledged; the projector's ledger applies them again from
-- the stream within seconds. Until it did, the projector went on applying what came in, and
-- an older version of a record the database had forgotten the newer ones of (an upstream's
-- redelivery, an event sent again) was newer than what the database held: it was applied,
-- and clients following the feed from tokens of the earlier history were served the record
-- going back to an older version than one they already had. Now a history registered after
-- another starts not caught up, and every write of contacts or items in it is refused
-- (SQLSTATE LR001, which the projector retries) until the ledger, having applied again what
-- the database lacked, marks it caught up. The ledger's own writes, and a rebuild's (which
-- take the stream's newest versions), say so with `lectern.applying_again`.
alter table read_model_histories
    add column caught_up boolean not null default true;

create or replace function read_model_history(out history_id bigint, out position_offset bigint)
    language plpgsql as $$
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
        -- A history forked from another (a failover, a restore) may lack events the other
        -- held: it is caught up once the ledger has applied them again. The first history
        -- of a database lacks nothing.
        insert into read_model_histories
            (system_identifier, timeline, database_oid, history_id, forked_from, position_offset, bound_served,
             caught_up)
        values (this_system, this_timeline, this_database, history_id, newest_id, position_offset,
                position_offset + pg_current_xact_id()::text::bigint, newest_id is null)
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

-- Refuses a write of contacts or items in a history that has not caught up, unless the
-- writer applies the stream's own versions (the ledger, a rebuild). Once a session has seen
-- its history caught up it remembers, for the history it saw.
create function read_model_require_caught_up() returns void language plpgsql as $$
declare
    current_history bigint;
    caught boolean;
begin
    if current_setting('lectern.applying_again', true) = 'on' then
        return;
    end if;
    select h.history_id into current_history from read_model_history() as h;
    if current_setting('lectern.caught_up', true) = current_history::text then
        return;
    end if;
    select h.caught_up into caught from read_model_histories as h where h.history_id = current_history;
    if caught then
        perform set_config('lectern.caught_up', current_history::text, false);
        return;
    end if;
    raise exception 'the read model''s history % has not yet taken back the events the history it was forked from held',
        current_history
        using errcode = 'LR001',
              hint = 'The projector''s ledger applies them again from the stream within seconds; retry then.';
end;
$$;

create or replace function read_model_check_writer() returns trigger language plpgsql as $$
begin
    if current_setting('lectern.read_model_writer', true) is distinct from 'on' then
        if pg_current_xact_id_if_assigned() is not null then
            raise exception 'this transaction wrote before its first write of %, so the changes feed cannot place its changes', tg_table_name
                using errcode = '55000',
                      hint = 'Write the read model first, or begin the transaction with `select read_model_begin_write()`.';
        end if;
        perform set_config('lectern.read_model_writer', 'on', true);
    end if;
    perform read_model_require_caught_up();
    return null;
end;
$$;

-- Marks the history the database is written in now caught up, if it is `expected` (the one
-- the ledger reconciled): a history that changed under the ledger's turn stays as it was.
create function read_model_mark_caught_up(expected bigint) returns boolean language sql as $$
    with current_history as (select h.history_id from read_model_history() as h)
    update read_model_histories as h set caught_up = true
    from current_history
    where h.history_id = current_history.history_id and h.history_id = expected and not h.caught_up
    returning true
$$;

do $$
begin
    execute format('alter function read_model_history() set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_require_caught_up() set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_mark_caught_up(bigint) set search_path = %I, pg_catalog', current_schema());
end;
$$;
