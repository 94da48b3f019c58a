-- Records with every shape the contract allows: nulls, Unicode, long and odd text,
-- large and negative amounts, both sorts' ties, and inactive rows that must stay hidden.
-- For one workspace, `:ws` (psql -v ws=<uuid>); used by scripts/lib/seeded-api.sh.

insert into contacts (workspace_id, id, version, status, name, email, phone, address, tin,
                      is_customer, is_supplier, created_at)
select :'ws'::uuid,
       md5('contact' || n)::uuid,
       1,
       case when n % 11 = 0 then 'archived' else 'active' end,
       (array['Acme GmbH', 'ärger & söhne', 'Zeta', '株式会社テスト', 'O''Brien %_\ Ltd',
              'a', repeat('Long name ', 30)])[1 + n % 7] || ' ' || n,
       case when n % 3 = 0 then null else 'billing' || n || '@example.com' end,
       case when n % 4 = 0 then null else '+49 30 ' || (1000000 + n) end,
       case when n % 5 = 0 then null else 'Hauptstr. ' || n || E', Berlin\nGermany' end,
       case when n % 2 = 0 then null else 'DE' || (100000000 + n) end,
       n % 2 = 0,
       n % 3 = 0,
       timestamptz '2025-02-03 08:00:00+00' + (n / 3) * interval '1 second 250 milliseconds'
  from generate_series(1, 60) as n;

insert into items (workspace_id, id, version, status, name, sku, description, type, unit,
                   sale_price_amount, sale_price_currency, purchase_price_amount,
                   purchase_price_currency, created_at)
select :'ws'::uuid,
       md5('item' || n)::uuid,
       1,
       case when n % 13 = 0 then 'deleted' else 'active' end,
       (array['Consulting hour', 'Widget', 'ß-Schraube', 'Ünterlegscheibe', '配送'])[1 + n % 5] || ' ' || n,
       case when n % 3 = 0 then null else 'SKU-' || n end,
       case when n % 2 = 0 then null else 'Described ' || n end,
       case when n % 2 = 0 then 'product' else 'service' end,
       case when n % 4 = 0 then null else (array['hour', 'pcs', 'kg'])[1 + n % 3] end,
       case when n % 5 = 0 then null else (array[120.00, -12345678901234.5678, 0.1, 0, 99999999999999999999.99])[1 + n % 5] end,
       case when n % 5 = 0 then null else (array['EUR', 'JPY', 'USD'])[1 + n % 3] end,
       case when n % 2 = 0 then null else 0.10 * n end,
       case when n % 2 = 0 then null else 'USD' end,
       timestamptz '2025-03-01 08:00:00+00' + (n / 2) * interval '1 hour'
  from generate_series(1, 60) as n;
