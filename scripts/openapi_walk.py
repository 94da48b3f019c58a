"""Walks lectern-api with the client openapi-python-client generated from its served
OpenAPI document, while openapi-core validates every exchange against that document.

Run by scripts/openapi-tools.sh, which starts the server on its seeded database and
generates the client package `lectern_client` into the directory given as --client.

What it proves: a generated client can read everything the API serves (contacts and
items with null fields, Money values, Unicode, errors) into its typed models, and every
response, success or error, is exactly what the document says (status, content type,
headers, body). Prints the number of responses validated; exits 1 on any failure.
"""

import argparse
import re
import sys
import traceback
import uuid
from datetime import datetime, timedelta
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import httpx
from openapi_core import OpenAPI
from openapi_core.datatypes import RequestParameters
from werkzeug.datastructures import Headers, ImmutableMultiDict

NAME = "openapi_walk.py"
# Small pages, so every listing takes several and every cursor is followed.
PAGE = 7
AMOUNT = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


class Failed(Exception):
    """A check of the walk that did not hold."""


def check(condition, message):
    if not condition:
        raise Failed(message)


class OpenApiRequest:
    """An httpx request as openapi-core reads one."""

    def __init__(self, request):
        url = urlsplit(str(request.url))
        self.host_url = f"{url.scheme}://{url.netloc}"
        self.path = url.path
        self.method = request.method.lower()
        self.body = request.content or None
        self.content_type = request.headers.get("content-type", "")
        self.parameters = RequestParameters(
            query=ImmutableMultiDict(
                [
                    (name, value)
                    for name, values in parse_qs(url.query, keep_blank_values=True).items()
                    for value in values
                ]
            ),
            header=Headers(list(request.headers.items())),
            cookie=ImmutableMultiDict(),
        )


class OpenApiResponse:
    """An httpx response as openapi-core reads one."""

    def __init__(self, response):
        self.status_code = response.status_code
        self.content_type = response.headers.get("content-type", "")
        self.headers = Headers(list(response.headers.items()))
        self.data = response.content


def describe(error):
    """openapi-core's error with the schema errors under it, which say where and why."""
    parts = [f"{type(error).__name__}: {error}"]
    cause = error.__cause__
    while cause is not None:
        parts.append(f"{type(cause).__name__}: {cause}")
        for schema_error in getattr(cause, "schema_errors", ()) or ():
            parts.append(f"  at {list(schema_error.absolute_path)}: {schema_error.message}")
        cause = cause.__cause__
    return "\n    ".join(parts)


class Validator:
    """Validates every exchange the client makes, as it happens (an httpx event hook)."""

    def __init__(self, document_path):
        self.openapi = OpenAPI.from_file_path(document_path)
        self.responses = 0
        self.requests = 0
        self.statuses = {}
        self.problems = []

    def allows_request(self, method, path_and_query, key):
        """Whether the document allows a request, sent nowhere."""
        request = httpx.Request(method, f"http://lectern.invalid{path_and_query}", headers={"X-API-Key": key})
        try:
            self.openapi.validate_request(OpenApiRequest(request))
            return True
        except Exception:  # noqa: BLE001 - any refusal is the answer
            return False

    def __call__(self, response):
        response.read()
        request = response.request
        what = f"{request.method} {request.url} -> {response.status_code}"
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        try:
            self.openapi.validate_response(OpenApiRequest(request), OpenApiResponse(response))
            self.responses += 1
        except Exception as error:  # noqa: BLE001 - every kind of failure is reported
            self.problems.append(f"response of {what} does not match the document:\n    {describe(error)}")
        # A 400 answers a request the walk made invalid on purpose; every other request
        # must be one the document allows.
        if response.status_code != 400:
            try:
                self.openapi.validate_request(OpenApiRequest(request))
                self.requests += 1
            except Exception as error:  # noqa: BLE001 - every kind of failure is reported
                self.problems.append(f"request {what} does not match the document:\n    {describe(error)}")


def walk(list_operation, client, parsed_type, **query):
    """Every record of a listing, following `nextCursor` until `hasMore` is false."""
    records, cursor, pages = [], None, 0
    while True:
        arguments = dict(query, limit=PAGE)
        if cursor is not None:
            arguments["cursor"] = cursor
        response = list_operation.sync_detailed(client=client, **arguments)
        check(response.status_code == 200, f"{query}: status {response.status_code}: {response.content[:300]!r}")
        page = response.parsed
        check(isinstance(page, parsed_type), f"{query}: parsed as {type(page).__name__}")
        check(len(page.data) <= PAGE, f"{query}: {len(page.data)} records on a page of {PAGE}")
        records.extend(page.data)
        pages += 1
        if not page.page.has_more:
            check(page.page.next_cursor is None, f"{query}: a last page with a cursor")
            return records, pages
        check(isinstance(page.page.next_cursor, str) and page.page.next_cursor, f"{query}: no cursor")
        cursor = page.page.next_cursor


def by_created_at(records):
    return [record.id for record in sorted(records, key=lambda record: (record.created_at, str(record.id)))]


def expect_error(response, status, code, models):
    check(response.status_code == status, f"expected {status}, got {response.status_code}: {response.content[:300]!r}")
    body = response.parsed
    check(isinstance(body, models.ErrorResponse), f"{status} parsed as {type(body).__name__}")
    check(body.error.code == models.ErrorCode(code), f"{status}: code {body.error.code}")
    check(isinstance(body.request_id, str) and body.request_id, f"{status}: request id {body.request_id!r}")
    return body


def walk_listing(name, operation, client, listing, expected):
    """Every record of a listing in both sorts, filtered by a kind and searched; each
    walk must give exactly the records the full walk says it should. `listing` holds the
    page model, the name sort, the kind filter with its predicate, and the search text
    with the fields it looks in. Returns the full walk's records and its page count."""
    records, pages = walk(operation, client, listing.page)
    check(len(records) == expected, f"{name}: walked {len(records)}, the database has {expected} active")
    ids = [record.id for record in records]
    check(len(set(ids)) == len(ids), f"{name}: a record came twice")
    check(ids == by_created_at(records), f"{name}: not in createdAt, id order")
    by_name, _ = walk(operation, client, listing.page, sort=listing.by_name)
    check({r.id for r in by_name} == set(ids), f"{name} by name: not the same records")
    of_kind, _ = walk(operation, client, listing.page, type_=listing.kind)
    wanted = {r.id for r in records if listing.in_kind(r)}
    check({r.id for r in of_kind} == wanted, f"{name} type={listing.kind.value}: not exactly the records of that type")
    found, _ = walk(operation, client, listing.page, search=listing.search, sort=listing.by_name)
    text = listing.search.lower()
    matching = {r.id for r in records if any(text in (field or "").lower() for field in listing.searched(r))}
    check(found and {r.id for r in found} == matching, f"{name} search={listing.search}: not exactly the matching ones")
    return records, pages


def retrieve_as_listed(operation, client, envelope_type, record):
    """Retrieves `record` by id: it must parse as the envelope and equal the listed one."""
    one = operation.sync_detailed(record.id, client=client)
    check(one.status_code == 200 and isinstance(one.parsed, envelope_type), f"{record.id}: {one.status_code}")
    check(one.parsed.data.to_dict() == record.to_dict(), f"{record.id}: retrieved differs from listed")


def walk_contacts(client, api, models, expected):
    listing = SimpleNamespace(
        page=models.ContactList,
        by_name=models.ListContactsSort.NAME,
        kind=models.ListContactsType.SUPPLIER,
        in_kind=lambda contact: contact.is_supplier,
        search="ACME",
        searched=lambda contact: (contact.name, contact.email, contact.phone, contact.tin),
    )
    contacts, pages = walk_listing("contacts", api.list_contacts, client, listing, expected)

    # What the typed models hold: nulls as None, Unicode intact, instants as UTC datetimes.
    check(all(isinstance(c.id, uuid.UUID) for c in contacts), "contacts: an id that is not a UUID")
    check(
        all(isinstance(c.created_at, datetime) and c.created_at.utcoffset() == timedelta(0) for c in contacts),
        "contacts: createdAt not a UTC datetime",
    )
    check(
        any(c.email is None for c in contacts) and any(isinstance(c.email, str) for c in contacts),
        "contacts: no null and filled email",
    )
    check(
        any(c.phone is None for c in contacts) and any(c.address is None for c in contacts),
        "contacts: no null phone or address",
    )
    check(any("株式会社テスト" in c.name for c in contacts), "contacts: the Japanese name did not survive")
    check(any("\n" in (c.address or "") for c in contacts), "contacts: the two-line address did not survive")

    for contact in (contacts[0], contacts[-1], next(c for c in contacts if c.email is None)):
        retrieve_as_listed(api.get_contact, client, models.ContactEnvelope, contact)
    return len(contacts), pages


def walk_items(client, api, models, expected):
    listing = SimpleNamespace(
        page=models.ItemList,
        by_name=models.ListItemsSort.NAME,
        kind=models.ListItemsType.PRODUCT,
        in_kind=lambda item: item.type_ == models.ItemType.PRODUCT,
        search="schraube",
        searched=lambda item: (item.name, item.sku, item.description),
    )
    items, pages = walk_listing("items", api.list_items, client, listing, expected)

    # Prices: a Money of exact decimal strings, or None; never a float.
    prices = [price for item in items for price in (item.sale_price, item.purchase_price)]
    check(any(price is None for price in prices), "items: no null price")
    money = [price for price in prices if price is not None]
    check(money and all(isinstance(price, models.Money) for price in money), "items: a price that is not Money")
    check(
        all(isinstance(p.amount, str) and AMOUNT.match(p.amount) for p in money),
        "items: an amount not a decimal string",
    )
    amounts = {price.amount for price in money}
    for exact in ("-12345678901234.5678", "99999999999999999999.99", "0.10"):
        check(exact in amounts, f"items: amount {exact} not served exactly: {sorted(amounts)}")
    check({i.type_ for i in items} == set(models.ItemType), "items: not both types")
    check(any(i.unit is None for i in items) and any(i.sku is None for i in items), "items: no null unit or sku")

    null_priced = next(i for i in items if i.sale_price is None)
    priced = next(i for i in items if i.sale_price is not None and i.purchase_price is not None)
    for item in (null_priced, priced):
        retrieve_as_listed(api.get_item, client, models.ItemEnvelope, item)
    return len(items), pages


def provoke_errors(clients, key, contacts_only_key, api, models):
    client = clients.with_key(key)
    bad = expect_error(api.list_contacts.sync_detailed(client=client, limit=0), 400, "VALIDATION_ERROR", models)
    check(
        isinstance(bad.error.details, list) and any(d.startswith("limit") for d in bad.error.details),
        f"400: details {bad.error.details!r}",
    )
    expect_error(api.list_items.sync_detailed(client=client, cursor="not-a-cursor"), 400, "VALIDATION_ERROR", models)
    # The server refuses a search holding NUL; the document says so, so that a validator
    # (and a client checking its input) refuses it first.
    nul = expect_error(api.list_contacts.sync_detailed(client=client, search="a\x00b"), 400, "VALIDATION_ERROR", models)
    check(any(d.startswith("search") for d in nul.error.details), f"NUL search: details {nul.error.details!r}")
    check(
        not clients.validator.allows_request("GET", "/v1/contacts?search=a%00b", key),
        "the document allows a search holding NUL, which the server refuses",
    )
    check(
        clients.validator.allows_request("GET", "/v1/contacts?search=50%25_off%5C", key),
        "the document refuses a search of ordinary characters",
    )
    stranger = clients.with_key("lk_live_AAAAAAAAAAAAAAAA_" + "A" * 43)
    expect_error(api.list_contacts.sync_detailed(client=stranger), 401, "UNAUTHORIZED", models)
    expect_error(api.get_item.sync_detailed(uuid.uuid4(), client=stranger), 401, "UNAUTHORIZED", models)
    contacts_only = clients.with_key(contacts_only_key)
    expect_error(api.list_items.sync_detailed(client=contacts_only), 403, "FORBIDDEN", models)
    expect_error(api.get_contact.sync_detailed(uuid.uuid4(), client=client), 404, "NOT_FOUND", models)
    expect_error(api.get_item.sync_detailed(uuid.uuid4(), client=client), 404, "NOT_FOUND", models)


class Clients:
    """Generated clients for any key, all sending through one validator."""

    def __init__(self, package, base_url, validator):
        self.package = package
        self.base_url = base_url
        self.validator = validator

    def with_key(self, key):
        """The generated client with `key` in `X-API-Key`, every exchange validated."""
        return self.package.AuthenticatedClient(
            base_url=self.base_url,
            token=key,
            prefix="",
            auth_header_name="X-API-Key",
            raise_on_unexpected_status=True,
            httpx_args={"event_hooks": {"response": [self.validator]}},
        )


def main():
    arguments = argparse.ArgumentParser(description=__doc__)
    arguments.add_argument("--document", required=True, help="the served OpenAPI document, saved")
    arguments.add_argument("--client", required=True, help="the directory holding the generated lectern_client")
    arguments.add_argument("--base-url", required=True)
    arguments.add_argument("--key", required=True, help="a key with contacts:read and items:read")
    arguments.add_argument("--contacts-only-key", required=True, help="a key with contacts:read only")
    arguments.add_argument("--active-contacts", type=int, required=True)
    arguments.add_argument("--active-items", type=int, required=True)
    options = arguments.parse_args()

    # The package exists only once openapi-tools.sh has generated it.
    sys.path.insert(0, options.client)
    import lectern_client
    from lectern_client import models
    from lectern_client.api.contacts import get_contact, list_contacts
    from lectern_client.api.items import get_item, list_items

    api = SimpleNamespace(
        list_contacts=list_contacts, get_contact=get_contact, list_items=list_items, get_item=get_item
    )
    validator = Validator(options.document)
    clients = Clients(lectern_client, options.base_url, validator)
    client = clients.with_key(options.key)
    try:
        contacts, contact_pages = walk_contacts(client, api, models, options.active_contacts)
        items, item_pages = walk_items(client, api, models, options.active_items)
        provoke_errors(clients, options.key, options.contacts_only_key, api, models)
    except Failed as failure:
        print(f"{NAME}: {failure}", file=sys.stderr)
        sys.exit(1)
    except Exception:  # noqa: BLE001 - the generated client refusing a body it was promised
        traceback.print_exc()
        print(f"{NAME}: the generated client could not read a response (traceback above)", file=sys.stderr)
        sys.exit(1)
    finally:
        for problem in validator.problems:
            print(f"{NAME}: {problem}", file=sys.stderr)
    if validator.problems:
        print(f"{NAME}: {len(validator.problems)} exchanges do not match the document", file=sys.stderr)
        sys.exit(1)
    statuses = ", ".join(f"{count} × {status}" for status, count in sorted(validator.statuses.items()))
    print(
        f"{NAME}: walked {contacts} contacts ({contact_pages} pages by createdAt) and {items} items ({item_pages} pages)"
    )
    print(f"{NAME}: {validator.responses} responses validated ({statuses}), {validator.requests} requests")


if __name__ == "__main__":
    main()
