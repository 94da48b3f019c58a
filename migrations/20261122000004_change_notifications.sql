-- Every committed change to the read model notifies `lectern_changes` once per touched
-- workspace, whoever wrote it (the projector, a repair by hand, a test). API processes
-- cache unchanged first pages and evict a workspace's pages on this notification.
-- Statement-level triggers with transition tables: one notification per workspace per
-- statement, not per row; PostgreSQL also folds duplicates within a transaction.

create function read_model_notify_changes() returns trigger language plpgsql as $$
begin
    perform pg_notify('lectern_changes', workspace_id::text)
    from (select distinct workspace_id from changed_rows) as touched;
    return null;
end;
$$;

create trigger contacts_inserted after insert on contacts
    referencing new table as changed_rows for each statement execute function read_model_notify_changes();
create trigger contacts_updated after update on contacts
    referencing new table as changed_rows for each statement execute function read_model_notify_changes();
create trigger contacts_deleted after delete on contacts
    referencing old table as changed_rows for each statement execute function read_model_notify_changes();

create trigger items_inserted after insert on items
    referencing new table as changed_rows for each statement execute function read_model_notify_changes();
create trigger items_updated after update on items
    referencing new table as changed_rows for each statement execute function read_model_notify_changes();
create trigger items_deleted after delete on items
    referencing old table as changed_rows for each statement execute function read_model_notify_changes();
