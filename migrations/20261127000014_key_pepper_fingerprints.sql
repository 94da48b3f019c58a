-- Which pepper each key's hash was made under, so the pepper can be rotated with an
-- overlap (LECTERN_PREVIOUS_KEY_PEPPERS) and `keys list` can tell when no key depends on
-- the old one any more. A key's hash is HMAC-SHA256(secret) under one pepper; nothing in
-- the row said which, so an operator could not know which keys a pepper still opens.
--
-- The fingerprint is the first 16 bytes of HMAC-SHA256 of a fixed label under the pepper:
-- it names the pepper without holding it, and cannot be turned back into it (a pepper is
-- at least 32 random bytes in production, so it cannot be guessed from it either).
--
-- Nullable, and left null on existing rows: their pepper was never recorded, and only a
-- process holding the key's secret can tell which pepper its hash is under. `keys list`
-- calls them unrecorded; the API records the fingerprint at a key's next use, when it also
-- hashes a key made under a previous pepper again under the current one.
alter table api_keys
    add column pepper_fingerprint bytea check (octet_length(pepper_fingerprint) = 16);

-- No new trigger: the statement that records a fingerprint always sets secret_hmac too
-- (to the same hash when only the fingerprint was missing), and the trigger that evicts
-- a changed key from every API process's cache fires on any update that sets secret_hmac,
-- so every process reads the recorded fingerprint afterwards and records it only once.
