-- A dead letter must be stored whatever bytes its message holds, or the projector would
-- retry it for ever and block every event pulled with it. NATS accepts a subject with a
-- NUL in it, which PostgreSQL's text refuses, and a database whose encoding is not UTF-8
-- refuses the characters it lacks. `subject` then holds the subject escaped, for people
-- and queries, and this column holds its exact bytes, for `dead-letters list` and
-- `retry`. Null when `subject` is exact, as it is for every row written before.
-- Added, not a change of type, so that projectors of the previous version, which write
-- `subject` alone, keep working while a deployment rolls over.
alter table dead_letters add column subject_bytes bytea;
