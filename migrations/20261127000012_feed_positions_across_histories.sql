-- Feed positions that survive the server's history, and a feed bound that only the read
-- model's own writers hold back (docs/architecture.md, "The changes feed").
--
-- A row's position (`change_xid`) was the id of the transaction that wrote it. Two things
-- break that: a PostgreSQL server whose history forks (a failover to a standby that missed
-- the last writes, a point-in-time restore, a restore into another server) hands out ids
-- again from below what clients already hold; and the feed's bound, the server-wide
-- `pg_snapshot_xmin`, waited for every writing transaction of every database.
--
-- Positions are now `offset + transaction id`, where the offset belongs to the history
-- the transaction ran in: a history is the server's system identifier and its timeline,
-- and a history this database has never written in gets an offset beyond every position
-- any earlier history can have handed out. Existing rows keep their positions: the history
-- this migration runs in takes offset 0.

create table read_model_histories (
    system_identifier bigint not null,
    timeline integer not null,
    -- Added to the transaction ids of this history's writers.
    position_offset bigint not null check (position_offset >= 0),
    first_written_at timestamptz not null default now(),
    -- The highest feed bound an API process served in this history, recorded at most about
    -- once a second: what a later history on another server (a restore by dump) must pass.
    bound_served bigint not null default 0,
    primary key (system_identifier, timeline)
);

-- The current WAL timeline: the first eight hex digits of the current WAL file's name.
-- A primary only (it reads the insert position); a standby has no writers.
create function read_model_timeline() returns integer language sql volatile as $$
    select ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::integer
$$;

-- 2^48 transaction ids: more than any history can consume after the moment its successor
-- forked off it (a restore to a point years back at 10,000 ids a second included), so a new
-- history's offset passes every position of the one it forked from; 2^15 histories fit in
-- a bigint.
create function read_model_history_margin() returns bigint language sql immutable as $$
    select 281474976710656::bigint
$$;

-- The offset of the history this session writes in, registering the history the first
-- time any session writes in it. Cached for the session, under the session's process id
-- (a value set for every session, by `alter role ... set`, is not one this session cached)
-- and its timeline, which each call checks: a promoted standby's sessions live on into the
-- new timeline. The system identifier is read only on a miss: it cannot change under a
-- session, and reading it reads the control file.
create function read_model_position_offset() returns bigint language plpgsql volatile as $$
declare
    this_timeline integer := read_model_timeline();
    key text := pg_backend_pid()::text || '/' || this_timeline::text || '/';
    cached text := current_setting('lectern.position_offset', true);
    this_system bigint;
    found bigint;
    inserted integer;
begin
    if cached is not null and starts_with(cached, key) then
        return substr(cached, length(key) + 1)::bigint;
    end if;
    this_system := (pg_control_system()).system_identifier;
    select position_offset into found
    from read_model_histories where system_identifier = this_system and timeline = this_timeline;
    if found is null then
        -- One registration at a time; a second writer waits here, then finds the first's row.
        lock table read_model_histories in share row exclusive mode;
        select position_offset into found
        from read_model_histories where system_identifier = this_system and timeline = this_timeline;
    end if;
    if found is null then
        select case when count(*) = 0 then 0
                    else greatest(max(position_offset) + read_model_history_margin(),
                                  max(bound_served) + read_model_history_margin()
                                      - pg_current_xact_id()::text::bigint,
                                  0)
               end
        into found from read_model_histories;
        insert into read_model_histories (system_identifier, timeline, position_offset, bound_served)
        values (this_system, this_timeline, found, found + pg_current_xact_id()::text::bigint)
        on conflict do nothing;
        get diagnostics inserted = row_count;
        if inserted = 0 then
            -- Another registered it, and this transaction's snapshot (repeatable read)
            -- cannot see its row: the transaction is retried, as after a serialization
            -- failure.
            raise exception 'the read model''s history (system %, timeline %) was registered concurrently',
                this_system, this_timeline using errcode = '40001';
        end if;
        raise log 'lectern: the read model is written in a new history (system %, timeline %): positions from % on',
            this_system, this_timeline, found;
    end if;
    perform set_config('lectern.position_offset', key || found::text, false);
    return found;
end;
$$;

-- The feed position of what the current transaction writes.
create function read_model_position() returns bigint language sql volatile as $$
    select read_model_position_offset() + pg_current_xact_id()::text::bigint
$$;

-- This history is the one every existing row and token was written in.
insert into read_model_histories (system_identifier, timeline, position_offset, bound_served)
values ((pg_control_system()).system_identifier, read_model_timeline(), 0, pg_current_xact_id()::text::bigint);

alter table contacts alter column change_xid set default read_model_position();
alter table items alter column change_xid set default read_model_position();

create or replace function read_model_stamp_change() returns trigger language plpgsql as $$
begin
    new.change_xid := read_model_position();
    return new;
end;
$$;

-- The position once per statement, not once per workspace it touched.
create or replace function read_model_notify_changes() returns trigger language plpgsql as $$
declare
    feed_position text;
begin
    if tg_op = 'DELETE' then
        perform pg_notify('lectern_changes', workspace_id::text || ' ' || tg_table_name)
        from (select distinct workspace_id from changed_rows) as touched;
    else
        feed_position := read_model_position()::text;
        perform pg_notify('lectern_changes', workspace_id::text || ' ' || tg_table_name || ' ' || feed_position)
        from (select distinct workspace_id from changed_rows) as touched;
    end if;
    return null;
end;
$$;

-- The feed's bound is the oldest transaction that holds a write lock on `contacts` or
-- `items` (read_model_feed_bound below). That is only sound if a transaction takes its id
-- after it takes that lock: one that wrote another table first, then the read model, would
-- write rows with an id the bound may already have passed. Such a transaction is refused
-- at its first read-model statement, unless it declared itself a writer at its start
-- (read_model_begin_write). A statement that begins the transaction's writing (no id yet)
-- marks the transaction, so its later statements pass.
create function read_model_check_writer() returns trigger language plpgsql as $$
begin
    if current_setting('lectern.read_model_writer', true) is distinct from 'on' then
        if pg_current_xact_id_if_assigned() is not null then
            raise exception 'this transaction wrote before its first write of %, so the changes feed cannot place its changes', tg_table_name
                using errcode = '55000',
                      hint = 'Write the read model first, or begin the transaction with `select read_model_begin_write()`.';
        end if;
        perform set_config('lectern.read_model_writer', 'on', true);
    end if;
    return null;
end;
$$;

-- Not on truncate: it writes no row, so it takes no position.
create trigger contacts_writer_checked before insert or update or delete on contacts
    for each statement execute function read_model_check_writer();
create trigger items_writer_checked before insert or update or delete on items
    for each statement execute function read_model_check_writer();

-- Declares the current transaction a writer of the read model before it writes anything:
-- takes both tables' lock (`lock_mode`, at least `row exclusive`) first, so the feed's
-- bound waits for it from then on, whatever it writes in which order.
create function read_model_begin_write(lock_mode text default 'row exclusive') returns void language plpgsql as $$
begin
    if pg_current_xact_id_if_assigned() is not null then
        raise exception 'read_model_begin_write() must come before the transaction writes anything'
            using errcode = '55000';
    end if;
    if lock_mode not in ('row exclusive', 'share row exclusive', 'exclusive', 'access exclusive') then
        raise exception 'read_model_begin_write(): % does not let the transaction write', lock_mode
            using errcode = '22023';
    end if;
    execute format('lock table contacts, items in %s mode', lock_mode);
    perform set_config('lectern.read_model_writer', 'on', true);
end;
$$;

-- A commit waits for its WAL flush only when its transaction wrote WAL before its commit
-- record: a transaction that only took an id (`select pg_current_xact_id()`) commits
-- without flushing, whatever `synchronous_commit` says. So a flush barrier (the
-- projector's, before it acknowledges; the feed's bound, below) writes a row here, one per
-- process so that no two wait on each other's row, in the transaction it commits
-- synchronously: its commit then waits until every commit before it is on disk.
create table read_model_flushes (
    writer text primary key,
    flushed_at timestamptz not null
);

-- Makes the current transaction's commit wait for the WAL flush, committed synchronously
-- whatever the server's setting; `process` names the calling process's row.
create function read_model_flush(process text) returns void language plpgsql volatile as $$
begin
    perform set_config('synchronous_commit', 'on', true);
    -- A row per session: two sessions of one process never queue on each other's row.
    insert into read_model_flushes (writer, flushed_at) values (process || ' ' || pg_backend_pid(), clock_timestamp())
    on conflict on constraint read_model_flushes_pkey do update set flushed_at = excluded.flushed_at;
    -- Rows of processes long gone, now and then.
    if random() < 0.001 then
        delete from read_model_flushes where flushed_at < now() - interval '1 day';
    end if;
end;
$$;

-- The feed's bound now: every row whose position is below it is committed, durable, and
-- below every position a writer can still take, on this server and after any crash of it.
--
-- - Committed: the bound is the oldest transaction id among the transactions that hold a
--   write lock on `contacts` or `items`, or this call's own id, which is newer than every id
--   taken before. Every writer of the read model takes its lock before its id (see
--   read_model_check_writer): one not holding the lock now either has ended, or takes its
--   id after this call's.
-- - Durable, and never reissued: this call takes an id and commits synchronously, so when it
--   returns, every commit before it is on disk, and a crash recovers the transaction id
--   counter past this call's id.
--
-- Returns the bound, the WAL position every commit below it precedes (a replica that has
-- replayed that far can serve the bound), and records the bound for the history when
-- `record` is true. `process` names the calling process (read_model_flush).
create function read_model_feed_bound(record boolean default false, process text default 'lectern')
returns table (bound bigint, wal_position bigint) language plpgsql volatile as $$
declare
    own bigint := pg_current_xact_id()::text::bigint;
    history_offset bigint := read_model_position_offset();
    oldest_writer bigint;
    this_database oid := (select oid from pg_database where datname = current_database());
    modulus constant bigint := 4294967296;
begin
    perform read_model_flush(process);
    -- The writers: the transactions holding a write lock on either table. Each one's id is
    -- read from its process (pg_stat_activity.backend_xid, set the moment an id is taken,
    -- before the lock on that id exists) or, for a prepared transaction, which has no
    -- process, from the lock on its id. pg_locks and pg_stat_activity give 32-bit ids; every
    -- one still running is within 2^31 of `own`, on either side (a writer can take its id
    -- after this call took its own), so the distance is read signed.
    with locks as materialized (
        select locktype, database, relation, mode, granted, virtualtransaction, transactionid, pid from pg_locks
    ), holders as (
        select distinct virtualtransaction, pid from locks
        where locktype = 'relation'
          and database = this_database
          and relation in ('contacts'::regclass, 'items'::regclass)
          and mode in ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
    ), ids as (
        select coalesce(activity.backend_xid, held.transactionid)::text::bigint as id
        from holders
        left join pg_stat_activity as activity on activity.pid = holders.pid
        left join locks as held on held.virtualtransaction = holders.virtualtransaction
            and held.locktype = 'transactionid' and held.mode = 'ExclusiveLock' and held.granted
    )
    select min(own - ((own % modulus - id + modulus + modulus / 2) % modulus - modulus / 2))
    into oldest_writer
    from ids where id is not null;
    bound := history_offset + least(own, coalesce(oldest_writer, own));
    wal_position := (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint;
    if record then
        update read_model_histories set bound_served = greatest(bound_served, bound)
        where system_identifier = (pg_control_system()).system_identifier and timeline = read_model_timeline();
    end if;
    return next;
end;
$$;

-- The functions that name the read model's tables find them where this migration made
-- them, whatever the caller's search_path: a `contacts` of another schema first on a
-- session's path must not stand in for the read model's.
do $$
begin
    execute format('alter function read_model_position_offset() set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_begin_write(text) set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_flush(text) set search_path = %I, pg_catalog', current_schema());
    execute format('alter function read_model_feed_bound(boolean, text) set search_path = %I, pg_catalog', current_schema());
end;
$$;
