"""{{name}}: a kstage selector plugin written in Python.

Plays the heaviest candidate Stage (the first of equal weights) instead of kstage's
weighted random choice, and lets no Stage wait longer than MAX_DELAY_MS.
"""

import kstage_plugin as kp
from wit_world import exports

NAME = "{{name}}"
VERSION = "0.1.0"

MAX_DELAY_MS = 1000
"""The longest a chosen Stage may wait, in milliseconds."""


class Metadata(exports.Metadata):
    def info(self):
        return kp.info(NAME, VERSION)


class Selector(exports.Selector):
    def select(self, object: str, candidates: list):
        # The object is at hand: `kp.parse_object(object).get(".spec.nodeName")`,
        # `.label("app")`. `raise kp.fail("...")` is the `err` answer.
        heaviest = candidates[0]
        for c in candidates:
            if c.weight > heaviest.weight:
                heaviest = c
        # None keeps the delay kstage drew.
        capped = heaviest.delay_ms is not None and heaviest.delay_ms > MAX_DELAY_MS
        return kp.selection(heaviest, delay_ms=MAX_DELAY_MS if capped else None)
