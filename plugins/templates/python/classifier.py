"""{{name}}: a kstage classifier plugin written in Python.

Decides what a failed step does next: 409 Conflict refreshes, 404 and 410 drop the job
quietly, a step that failed MAX_ATTEMPTS times is dropped with a warning, 429 and 5xx
are retried after the server's Retry-After (else RETRY_MS), anything else gets kstage's
backoff.
"""

import kstage_plugin as kp
from wit_world import exports
from wit_world.imports.types import FailureKind

NAME = "{{name}}"
VERSION = "0.1.0"

MAX_ATTEMPTS = 5
"""Failures of one step before the job is dropped."""
RETRY_MS = 1000
"""The wait before retrying a 429 or 5xx that came without Retry-After, in milliseconds."""


class Metadata(exports.Metadata):
    def info(self):
        return kp.info(NAME, VERSION)


class Classifier(exports.Classifier):
    def classify(self, failure):
        # The object the step saw: `kp.parse_object(failure.object)`.
        status = failure.status if failure.kind == FailureKind.HTTP else None
        if status == 409:
            return kp.refresh()
        if status in (404, 410):
            return kp.drop(warn=False)
        # `attempt` counts the failures before this one.
        if failure.attempt + 1 >= MAX_ATTEMPTS:
            return kp.drop(warn=True)
        if status is not None and (status == 429 or status >= 500):
            after = failure.retry_after_ms
            return kp.retry_after(after if after is not None else RETRY_MS)
        return kp.backoff()
