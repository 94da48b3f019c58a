// What an integrator writes against the types openapi-typescript generates from the
// served document, checked by `tsc --strict` in scripts/openapi-tools.sh: once an entry's
// `change` is "upserted", its `record` is a Contact, never null, so it goes into a map of
// contacts without a cast or a null check. A document that did not tie `record` to
// `change` would make tsc refuse the `set` below.
import type { components } from "./lectern";

type Contact = components["schemas"]["Contact"];
type ContactChanges = components["schemas"]["ContactChanges"];

export function apply(page: ContactChanges, mirror: Map<string, Contact>): void {
  for (const entry of page.data) {
    if (entry.change === "upserted") {
      mirror.set(entry.id, entry.record);
    } else {
      mirror.delete(entry.id);
    }
  }
}
