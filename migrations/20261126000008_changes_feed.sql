-- The changes feed (docs/architecture.md, "The changes feed"). Every record has an entry
-- in `feed_entries` holding its position in its workspace's change order for its table;
-- a sync token is "everything after position P". Positions come from one counter row per
-- workspace and table, advanced at the end of the statement that wrote the records: the
-- counter's row lock, held until the transaction ends, makes a workspace's writers commit
-- their positions in the order they took them, so a reader can never see position 11
-- committed while 10 is still to come. The records themselves are written first, without
-- the lock, so writers of one workspace wait for each other only for the entries' short
-- write and their commit.

create table change_counters (
    workspace_id uuid not null,
    resource text not null check (resource in ('contacts', 'items')),
    -- The highest position taken; every committed entry's position is at most this.
    newest_position bigint not null check (newest_position >= 0),
    primary key (workspace_id, resource)
);

create table feed_entries (
    workspace_id uuid not null,
    resource text not null check (resource in ('contacts', 'items')),
    id uuid not null,
    -- The position of the record's last change.
    position bigint not null,
    primary key (workspace_id, resource, id)
);

-- The feed's order; unique, so two changes never share a position whatever wrote them.
create unique index feed_entries_in_order on feed_entries (workspace_id, resource, position);

-- Existing records get positions now, so a deployment upgrades in place and a first full
-- sync sees every record it already had.
insert into feed_entries (workspace_id, resource, id, position)
select workspace_id, 'contacts', id,
       row_number() over (partition by workspace_id order by created_at nulls first, id)
from contacts;
insert into feed_entries (workspace_id, resource, id, position)
select workspace_id, 'items', id,
       row_number() over (partition by workspace_id order by created_at nulls first, id)
from items;
insert into change_counters (workspace_id, resource, newest_position)
select workspace_id, resource, max(position) from feed_entries group by workspace_id, resource;

-- The projector (lectern_read_model's batch upsert) takes the positions of its records in
-- the statement that writes them, and says so in `lectern.feed_positions_taken`. Any other
-- writer (a repair by hand, a script) gets them here, once per statement, so its change
-- reaches the feed too.
create function read_model_take_feed_positions() returns trigger language plpgsql as $$
begin
    if current_setting('lectern.feed_positions_taken', true) = 'on' then
        return null;
    end if;
    with taken as (
        insert into change_counters as counter (workspace_id, resource, newest_position)
        select workspace_id, tg_table_name, count(*) from changed_rows group by workspace_id order by workspace_id
        on conflict (workspace_id, resource) do update
            set newest_position = counter.newest_position + excluded.newest_position
        returning workspace_id, newest_position
    )
    insert into feed_entries as entry (workspace_id, resource, id, position)
    select changed.workspace_id, tg_table_name, changed.id,
           taken.newest_position - count(*) over (partition by changed.workspace_id)
               + row_number() over (partition by changed.workspace_id order by changed.id)
    from changed_rows as changed join taken on taken.workspace_id = changed.workspace_id
    on conflict (workspace_id, resource, id) do update set position = excluded.position;
    return null;
end;
$$;

create trigger contacts_positioned_on_insert after insert on contacts
    referencing new table as changed_rows for each statement execute function read_model_take_feed_positions();
create trigger contacts_positioned_on_update after update on contacts
    referencing new table as changed_rows for each statement execute function read_model_take_feed_positions();
create trigger items_positioned_on_insert after insert on items
    referencing new table as changed_rows for each statement execute function read_model_take_feed_positions();
create trigger items_positioned_on_update after update on items
    referencing new table as changed_rows for each statement execute function read_model_take_feed_positions();

-- Every committed change of the feed notifies `lectern_changes` with `<workspace> <table>
-- <newest position>`, so API processes know each feed's head without a query (an empty
-- poll is answered from memory) and wake exactly the long polls of that workspace and
-- table. The records' own notifications (`<workspace>`) still evict first pages.
create function feed_notify_heads() returns trigger language plpgsql as $$
begin
    perform pg_notify('lectern_changes', workspace_id::text || ' ' || resource || ' ' || newest::text)
    from (select workspace_id, resource, max(position) as newest from changed_entries group by workspace_id, resource)
        as touched;
    return null;
end;
$$;

create trigger feed_entries_inserted after insert on feed_entries
    referencing new table as changed_entries for each statement execute function feed_notify_heads();
create trigger feed_entries_updated after update on feed_entries
    referencing new table as changed_entries for each statement execute function feed_notify_heads();
