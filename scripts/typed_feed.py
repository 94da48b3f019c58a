"""What an integrator writes against the generated client to mirror the contacts feed,
checked by mypy --strict in scripts/openapi-tools.sh: once an entry is known to be
`upserted`, its `record` is a Contact, never optional, so it goes into a mapping of
contacts without a cast or a None check. A document that did not tie `record` to `change`
would make mypy refuse the assignment below.
"""

from lectern_client.models.contact import Contact
from lectern_client.models.contact_changes import ContactChanges
from lectern_client.models.contact_removed import ContactRemoved
from lectern_client.models.contact_upserted import ContactUpserted


def apply(page: ContactChanges, mirror: dict[str, Contact]) -> None:
    """Upsert on `upserted`, delete on `removed`, as the contract says."""
    for entry in page.data:
        if isinstance(entry, ContactUpserted):
            mirror[str(entry.id)] = entry.record
        elif isinstance(entry, ContactRemoved):
            mirror.pop(str(entry.id), None)
