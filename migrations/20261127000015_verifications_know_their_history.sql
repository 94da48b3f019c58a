-- A verify's result holds for the database it ran on. After a restore or a failover the
-- table comes back with the result of a verify that ran before, on rows the database may
-- no longer hold (docs/operations.md, "Backup and restore"); `status` must not show it as
-- the read model's state now. Each verify records the history it ran in (the server's
-- system identifier and timeline, as `read_model_histories` keys them); rows from before
-- this migration have none and are taken as the current history's.
alter table read_model_verifications
    add column system_identifier bigint default (pg_control_system()).system_identifier,
    add column timeline integer default read_model_timeline();
