-- Row and statement triggers on insert, update and delete do not fire on TRUNCATE, so a
-- truncated table left every API process's caches serving what it held: keys that no
-- longer exist and first pages of records that are gone. These notify with `*`, which
-- each cache takes as "forget everything".

create function notify_everything_changed() returns trigger language plpgsql as $$
begin
    -- TG_ARGV[0]: the channel the table's caches listen on.
    perform pg_notify(tg_argv[0], '*');
    return null;
end;
$$;

create trigger api_keys_truncated after truncate on api_keys
    for each statement execute function notify_everything_changed('lectern_api_keys');
create trigger contacts_truncated after truncate on contacts
    for each statement execute function notify_everything_changed('lectern_changes');
create trigger items_truncated after truncate on items
    for each statement execute function notify_everything_changed('lectern_changes');
