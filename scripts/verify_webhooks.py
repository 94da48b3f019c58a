"""Verifies deliveries with the official Standard Webhooks library, as a receiver would.

Reads a JSON array on stdin: [{"secrets": ["whsec_…", …], "headers": {…}, "body": "…"}, …].
A delivery passes when the library verifies it with at least one of its secrets (several
while a rotation overlaps: the receiver may hold either). Prints "verified N" and exits 0
when every delivery passes; otherwise names each failure and exits 1.
"""

import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main() -> int:
    deliveries = json.load(sys.stdin)
    failures = []
    for delivery in deliveries:
        problems = []
        for secret in delivery["secrets"]:
            try:
                Webhook(secret).verify(delivery["body"], delivery["headers"])
                break
            except WebhookVerificationError as error:
                problems.append(str(error))
        else:
            failures.append(f"{delivery['headers'].get('webhook-id')}: {problems}")
    for failure in failures:
        print(f"not verified: {failure}", file=sys.stderr)
    print(f"verified {len(deliveries) - len(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
