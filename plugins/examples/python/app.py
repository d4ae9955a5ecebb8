"""label-router: a kstage selector plugin written in Python.

An object names its next Stage with the label `kstage.dev/next-stage` (and, optionally,
the delay with the annotation `kstage.dev/delay-ms`). Objects without the label get a
weighted choice among the candidates, drawn with the host's random source.
"""

import json
import re

from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import Candidate, PluginInfo, Selection
from componentize_py_types import Err

NAME = "label-router"
VERSION = "0.1.0"
INTERFACE_VERSION = "0.1.0"

NEXT_STAGE_LABEL = "kstage.dev/next-stage"
DELAY_ANNOTATION = "kstage.dev/delay-ms"

_INTEGER = re.compile(r"-?[0-9]+")
_S64_MIN = -(2**63)
_S64_MAX = 2**63 - 1


def _string_map(meta: dict, field: str) -> dict:
    """`metadata.labels` or `metadata.annotations`, as a dict (empty when absent)."""
    value = meta.get(field)
    return value if isinstance(value, dict) else {}


def _delay(annotations: dict):
    """The delay the annotation asks for, `None` without it; raises Err when invalid."""
    if DELAY_ANNOTATION not in annotations:
        return None
    raw = annotations[DELAY_ANNOTATION]
    text = raw.strip() if isinstance(raw, str) else None
    if text is None or not _INTEGER.fullmatch(text):
        raise Err(f"annotation {DELAY_ANNOTATION}: {raw!r} is not an integer (milliseconds)")
    value = int(text)
    if not _S64_MIN <= value <= _S64_MAX:
        raise Err(f"annotation {DELAY_ANNOTATION}: {text} is out of range")
    return value


def _weighted(candidates: list) -> Candidate:
    """Weighted choice among the candidates with weight > 0; the first when all are 0."""
    weighted = [c for c in candidates if c.weight > 0]
    total = sum(c.weight for c in weighted)
    if total == 0:
        return candidates[0]
    point = host.random() % total
    for c in weighted:
        if point < c.weight:
            return c
        point -= c.weight
    return weighted[-1]  # not reached: point < total


class Metadata(exports.Metadata):
    def info(self) -> PluginInfo:
        return PluginInfo(name=NAME, version=VERSION, interface_version=INTERFACE_VERSION)


class Selector(exports.Selector):
    def select(self, object: str, candidates: list):
        try:
            obj = json.loads(object)
        except ValueError as e:
            raise Err(f"object is not JSON: {e}")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        meta = meta if isinstance(meta, dict) else {}

        wanted = _string_map(meta, "labels").get(NEXT_STAGE_LABEL)
        if isinstance(wanted, str) and wanted != "":
            for c in candidates:
                if c.name == wanted:
                    return Selection(stage=c.name, delay_ms=_delay(_string_map(meta, "annotations")))
            # The Stage it names did not match (yet): the object waits for it.
            return None

        chosen = _weighted(candidates)
        return Selection(stage=chosen.name, delay_ms=None)
