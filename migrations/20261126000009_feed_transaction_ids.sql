-- The changes feed without a lock (docs/architecture.md, "The changes feed"). Every row
-- carries the id of the transaction that last wrote it; the feed is ordered by
-- (transaction id, record id) and serves only rows whose transaction is older than the
-- oldest writing transaction still running (`pg_snapshot_xmin`), so a reader never sees
-- a later transaction's rows while an earlier one may still commit. The per-workspace
-- counters this replaces made the projector's batches wait on each other.
drop trigger contacts_positioned on contacts;
drop trigger contacts_repositioned on contacts;
drop trigger items_positioned on items;
drop trigger items_repositioned on items;
drop function read_model_take_change_position();
drop index contacts_changes;
drop index items_changes;
alter table contacts drop column change_position;
alter table items drop column change_position;
drop table change_counters;

-- Existing rows take this migration's transaction id: one block, ordered by id, before
-- every later change. A bigint (an xid8's value), so that the feed's statements compare
-- plain numbers; inserts get it from the default.
alter table contacts add column change_xid bigint not null default (pg_current_xact_id()::text::bigint);
alter table items add column change_xid bigint not null default (pg_current_xact_id()::text::bigint);
create index contacts_changes on contacts (workspace_id, change_xid, id);
create index items_changes on items (workspace_id, change_xid, id);

-- The projector's upsert sets the column on conflict; any other writer's update (a repair
-- by hand) is stamped here, so its change reaches the feed too. The `WHEN` clause is
-- evaluated in C, and the projector's statements never meet it.
create function read_model_stamp_change() returns trigger language plpgsql as $$
begin
    new.change_xid := pg_current_xact_id()::text::bigint;
    return new;
end;
$$;
create trigger contacts_restamped before update on contacts
    for each row when (new.change_xid = old.change_xid) execute function read_model_stamp_change();
create trigger items_restamped before update on items
    for each row when (new.change_xid = old.change_xid) execute function read_model_stamp_change();

-- Notifications carry the writing transaction's id, `<workspace> <table> <transaction>`:
-- each API process keeps each feed's newest transaction from them.
create or replace function read_model_notify_changes() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        perform pg_notify('lectern_changes', workspace_id::text || ' ' || tg_table_name)
        from (select distinct workspace_id from changed_rows) as touched;
    else
        perform pg_notify('lectern_changes',
                          workspace_id::text || ' ' || tg_table_name || ' ' || pg_current_xact_id()::text)
        from (select distinct workspace_id from changed_rows) as touched;
    end if;
    return null;
end;
$$;
