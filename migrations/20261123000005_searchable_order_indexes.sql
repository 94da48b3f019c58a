-- The createdAt order index carries what a search filters on, so that a search can
-- pick its page of ids from the index alone (an index-only scan, no row read until the
-- page is known).
--
-- Why: the trigram index's posting lists span every workspace. A search in a workspace
-- of 800 contacts decoded the lists of a term's trigrams across all million rows (about
-- 2 ms for "gmbh" at the benchmark's scale), and a common term in a large workspace
-- fetched and sorted every match. Walking the workspace's own range of the order index
-- and filtering each entry costs about 0.3 ms in both cases: a small workspace has few
-- entries, and a common term fills its page after a few hundred. The trigram index
-- stays for rare terms in large workspaces, where walking the order index would read
-- the whole workspace; PostgreSQL picks between the two with the real pattern
-- (searches are planned per request, see db/listing.rs).
--
-- The type filters' columns (is_customer, is_supplier; items' type) are carried too, so
-- a filtered search is still decided in the index.
--
-- Only the default order gets this: the extra columns make an index half again as
-- large, and searches sorted by name are the rarer kind; they use the trigram index or
-- the name index as before.
--
-- Index-only scans skip the row only on pages the visibility map marks all-visible;
-- pages changed since the last vacuum cost a row read, as every search did before.
--
-- Rebuilt in this migration's transaction: writes to the table wait for the build (a
-- few seconds per million rows; the projector's batches wait and then carry on), reads
-- go on until the old index is dropped at commit.

drop index contacts_by_created;
-- listContacts, sort=createdAt: keyset range scan within one workspace; with search,
-- the index-only scan that picks a page of ids.
create index contacts_by_created on contacts (workspace_id, created_at, id)
    include (search_text, is_customer, is_supplier)
    where status = 'active';

drop index items_by_created;
create index items_by_created on items (workspace_id, created_at, id)
    include (search_text, type)
    where status = 'active';

-- The planner prices an index-only scan by the share of pages the visibility map marks
-- all-visible (pg_class.relallvisible), which only ANALYZE and VACUUM refresh. After
-- many random updates that share is stale: measured on a million contacts with 15 %
-- of them updated, a small-workspace search still took the index-only scan and read a
-- row per index entry (245-332 searches/s against 1,290-1,360 before the updates);
-- after an ANALYZE it took the trigram index (504-544/s). Analyze after 2 % of the
-- rows change (the default is 10 %): an analyze samples 30,000 rows and runs at most
-- once a minute per table.
alter table contacts set (autovacuum_analyze_scale_factor = 0.02);
alter table items set (autovacuum_analyze_scale_factor = 0.02);
