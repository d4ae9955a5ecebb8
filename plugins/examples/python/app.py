"""label-router: a kstage selector plugin written in Python.

An object names its next Stage with the label `kstage.dev/next-stage` (and, optionally,
the delay with the annotation `kstage.dev/delay-ms`). Objects without the label get a
weighted choice among the candidates, drawn with the host's random source.

Object access, candidates and answers come from kstage's Python SDK (`kstage_plugin`,
plugins/sdk/python).
"""

import re

import kstage_plugin as kp
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import PluginInfo

NAME = "label-router"
VERSION = "0.1.0"

NEXT_STAGE_LABEL = "kstage.dev/next-stage"
DELAY_ANNOTATION = "kstage.dev/delay-ms"

_INTEGER = re.compile(r"-?[0-9]+")
_S64_MIN = -(2**63)
_S64_MAX = 2**63 - 1


def _delay(obj: kp.Object):
    """The delay the annotation asks for, `None` without it; raises Err when invalid."""
    raw = obj.get_in("metadata", "annotations", DELAY_ANNOTATION)
    if raw is kp.MISSING:
        return None
    text = raw.strip() if isinstance(raw, str) else None
    if text is None or not _INTEGER.fullmatch(text):
        raise kp.fail(f"annotation {DELAY_ANNOTATION}: {raw!r} is not an integer (milliseconds)")
    value = int(text)
    if not _S64_MIN <= value <= _S64_MAX:
        raise kp.fail(f"annotation {DELAY_ANNOTATION}: {text} is out of range")
    return value


class Metadata(exports.Metadata):
    def info(self) -> PluginInfo:
        return kp.info(NAME, VERSION)


class Selector(exports.Selector):
    def select(self, object: str, candidates: list):
        obj = kp.parse_object(object)

        wanted = obj.label(NEXT_STAGE_LABEL)
        if wanted:
            chosen = kp.find(candidates, wanted)
            # A Stage it names that did not match (yet): the object waits for it.
            return kp.selection(chosen, delay_ms=_delay(obj)) if chosen else None

        # Weighted choice among the candidates with weight > 0, drawn from the host's
        # random source; the first candidate when every weight is 0 (no draw then).
        if kp.total_weight(candidates) == 0:
            return kp.selection(candidates[0])
        return kp.selection(kp.weighted(candidates, host.random()))
