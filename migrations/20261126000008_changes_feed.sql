-- The changes feed (docs/architecture.md, "The changes feed"). Every row carries its
-- position in its workspace's change order for its table; a sync token is "everything
-- after position P". Positions come from one counter row per workspace and table,
-- advanced inside the transaction that writes the rows: the counter's row lock makes a
-- workspace's writers take positions one transaction at a time, so positions are
-- committed in the order they are taken and a reader can never see position 11
-- committed while 10 is still to come. Gaps are harmless (a batch takes a position for
-- every row it sends, also for rows its version guard leaves alone).

create table change_counters (
    workspace_id uuid not null,
    resource text not null check (resource in ('contacts', 'items')),
    -- The highest position taken; every committed row's position is at most this.
    newest_position bigint not null check (newest_position >= 0),
    primary key (workspace_id, resource)
);

-- Existing rows get positions now, so a deployment upgrades in place and a first full
-- sync sees every record it already had.
alter table contacts add column change_position bigint;
alter table items add column change_position bigint;

update contacts as c set change_position = numbered.position
from (
    select workspace_id, id,
           row_number() over (partition by workspace_id order by created_at nulls first, id) as position
    from contacts
) as numbered
where c.workspace_id = numbered.workspace_id and c.id = numbered.id;

update items as i set change_position = numbered.position
from (
    select workspace_id, id,
           row_number() over (partition by workspace_id order by created_at nulls first, id) as position
    from items
) as numbered
where i.workspace_id = numbered.workspace_id and i.id = numbered.id;

insert into change_counters (workspace_id, resource, newest_position)
select workspace_id, 'contacts', max(change_position) from contacts group by workspace_id;
insert into change_counters (workspace_id, resource, newest_position)
select workspace_id, 'items', max(change_position) from items group by workspace_id;

alter table contacts alter column change_position set not null;
alter table items alter column change_position set not null;

-- The feed's order within one workspace; unique, so two changes can never share a
-- position whatever wrote them.
create unique index contacts_changes on contacts (workspace_id, change_position);
create unique index items_changes on items (workspace_id, change_position);

-- The projector (lectern_read_model's batch upsert) takes positions for a whole batch
-- in one statement. Any other writer (a repair by hand, a script) gets one per row
-- here, so its change reaches the feed too: an insert without a position, or an update
-- that leaves the position as it was.
create function read_model_take_change_position() returns trigger language plpgsql as $$
begin
    insert into change_counters as c (workspace_id, resource, newest_position)
    values (new.workspace_id, tg_table_name, 1)
    on conflict (workspace_id, resource) do update set newest_position = c.newest_position + 1
    returning newest_position into new.change_position;
    return new;
end;
$$;

create trigger contacts_positioned before insert on contacts
    for each row when (new.change_position is null) execute function read_model_take_change_position();
create trigger contacts_repositioned before update on contacts
    for each row when (new.change_position = old.change_position) execute function read_model_take_change_position();
create trigger items_positioned before insert on items
    for each row when (new.change_position is null) execute function read_model_take_change_position();
create trigger items_repositioned before update on items
    for each row when (new.change_position = old.change_position) execute function read_model_take_change_position();

-- Notifications now say which table changed and its newest position in the workspace,
-- `<workspace> <table> <position>`, so API processes know each feed's head without a
-- query (an empty poll is answered from memory) and wake exactly the long polls of
-- that workspace and table. A delete carries no position (the rows are gone).
create or replace function read_model_notify_changes() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        perform pg_notify('lectern_changes', workspace_id::text || ' ' || tg_table_name)
        from (select distinct workspace_id from changed_rows) as touched;
    else
        perform pg_notify('lectern_changes', workspace_id::text || ' ' || tg_table_name || ' ' || newest::text)
        from (select workspace_id, max(change_position) as newest from changed_rows group by workspace_id) as touched;
    end if;
    return null;
end;
$$;
