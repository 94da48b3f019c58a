-- A history's registration is committed durably, whatever the registering transaction's
-- own commit mode (docs/architecture.md, "Positions across the server's history").
--
-- The first write on a new server or timeline registers its history, in the writer's own
-- transaction; the projector commits most batches without waiting for their flush. A crash
-- in that moment lost the registration after the API had read it and handed out tokens of
-- it: once the server was back, the next write registered another id, and clients whose
-- tokens named the lost one were told to start over, though the database never left the
-- history they synced. The registering transaction now waits for its flush, so nothing is
-- read of a history that a crash can take back.
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
        -- Durable before anyone reads it: the transaction that registers may be a batch
        -- committed without waiting for its flush, and a crash would lose the row after the
        -- API had handed out tokens of it; the next write would register another id, and
        -- every client of this history would be told to start over for nothing.
        perform set_config('synchronous_commit', 'on', true);
        raise log 'lectern: the read model is written in a new history % (system %, timeline %, forked from %): positions from % on',
            history_id, this_system, this_timeline, newest_id, position_offset;
    end if;
    perform set_config('lectern.history', key || position_offset::text || '/' || history_id::text, false);
end;
$$;

do $$
begin
    execute format('alter function read_model_history() set search_path = %I, pg_catalog', current_schema());
end;
$$;
