"""Helpers for kstage plugins written in Python (componentize-py).

Import it beside the bindings componentize-py generates (`wit_world`); the build adds
this folder to the module path (`componentize-py ... componentize -p <this folder>`):

    import kstage_plugin as kp

    class Selector(exports.Selector):
        def select(self, object: str, candidates: list):
            obj = kp.parse_object(object)          # raises Err when not JSON
            wanted = obj.label("example.com/next")
            chosen = kp.find(candidates, wanted) or candidates[0]
            return kp.selection(chosen)            # kstage's delay; delay_ms=... to set one

Objects: `obj.get(".metadata.labels.app")`, `obj.get('metadata.labels["app.kubernetes.io/name"]')`,
`obj.get("status.conditions[0].type")`, `obj.name`, `obj.namespace`, `obj.label(k)`,
`obj.labels()`, `obj.annotation(k)`, `obj.annotations()`. Candidates: `find`,
`total_weight`, `weighted`. Answers: `selection`, `retry_after`, `backoff`, `refresh`,
`drop`, `info`. Nothing here needs the bindings until an answer is built, so the module
also imports (and is tested) in plain Python.
"""

import json

INTERFACE_VERSION = "0.1.0"


class _Missing:
    def __repr__(self):
        return "MISSING"


MISSING = _Missing()
"""What `get` returns for a path that is not there (JSON null is `None`)."""


def _err(message: str):
    """The `err` answer of a result-returning export (componentize-py's Err)."""
    try:
        from componentize_py_types import Err
    except ImportError:  # plain Python (tests): an ordinary exception
        return ValueError(message)
    return Err(message)


def split_path(path: str) -> list:
    """The keys of a path: `.a.b`, `a.0` or `a[0]` (arrays), `a["key.with.dots"]`
    (JSON string escapes allowed). "" and "." are the value itself. Raises ValueError
    when malformed."""
    keys = []
    rest = path[1:] if path.startswith(".") else path
    while rest:
        if rest.startswith('["'):
            end = _closing_quote(rest, 2)
            if end < 0 or rest[end + 1 : end + 2] != "]":
                raise ValueError(f"malformed path {path!r}: unterminated [\"...\"]")
            keys.append(json.loads(rest[1 : end + 1]))
            rest = rest[end + 2 :]
        elif rest.startswith("["):
            end = rest.find("]")
            if end < 0 or not rest[1:end].isdigit() or not rest[1:end].isascii():
                raise ValueError(f"malformed path {path!r}: [...] holds an index or a quoted key")
            keys.append(rest[1:end])
            rest = rest[end + 1 :]
        else:
            end = min((i for i in (rest.find("."), rest.find("[")) if i >= 0), default=len(rest))
            if end == 0:
                raise ValueError(f"malformed path {path!r}: empty key")
            keys.append(rest[:end])
            rest = rest[end:]
        if rest.startswith("."):
            rest = rest[1:]
            if not rest:
                raise ValueError(f"malformed path {path!r}: ends with a dot")
        elif rest and not rest.startswith("["):
            raise ValueError(f"malformed path {path!r}: expected '.' or '['")
    return keys


def _closing_quote(text: str, start: int) -> int:
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    return -1


def get_in(value, *keys, default=MISSING):
    """The value reached by keys (object keys; decimal indexes into lists)."""
    for key in keys:
        if isinstance(value, dict):
            if key not in value:
                return default
            value = value[key]
        elif isinstance(value, list) and _is_index(key):
            index = int(key)
            if index >= len(value):
                return default
            value = value[index]
        else:
            return default
    return value


def _is_index(key) -> bool:
    if isinstance(key, bool):
        return False
    if isinstance(key, int):
        return key >= 0
    return isinstance(key, str) and key.isascii() and key.isdigit()


def get(value, path: str, default=MISSING):
    """The value at path in decoded JSON; `default` when missing or malformed."""
    try:
        keys = split_path(path)
    except ValueError:
        return default
    return get_in(value, *keys, default=default)


class Object:
    """A Kubernetes object: the JSON text kstage passed, decoded once."""

    def __init__(self, tree, text: str = ""):
        self.tree = tree
        self.text = text

    def get(self, path: str, default=MISSING):
        """The value at path (see `split_path`); `default` when missing or malformed."""
        return get(self.tree, path, default)

    def get_in(self, *keys, default=MISSING):
        """The value reached by keys, for keys that are not worth a path."""
        return get_in(self.tree, *keys, default=default)

    def get_str(self, path: str):
        """The string at path; None when missing or not a string."""
        value = self.get(path)
        return value if isinstance(value, str) else None

    @property
    def name(self) -> str:
        """metadata.name ("" when absent)."""
        value = self.get_in("metadata", "name")
        return value if isinstance(value, str) else ""

    @property
    def namespace(self) -> str:
        """metadata.namespace ("" when absent)."""
        value = self.get_in("metadata", "namespace")
        return value if isinstance(value, str) else ""

    def label(self, key: str):
        """The label key; None when absent or not a string."""
        value = self.get_in("metadata", "labels", key)
        return value if isinstance(value, str) else None

    def annotation(self, key: str):
        """The annotation key; None when absent or not a string."""
        value = self.get_in("metadata", "annotations", key)
        return value if isinstance(value, str) else None

    def labels(self) -> dict:
        """metadata.labels with string values ({} when absent)."""
        return self._strings("labels")

    def annotations(self) -> dict:
        """metadata.annotations with string values ({} when absent)."""
        return self._strings("annotations")

    def _strings(self, field: str) -> dict:
        value = self.get_in("metadata", field)
        if not isinstance(value, dict):
            return {}
        return {k: v for k, v in value.items() if isinstance(v, str)}


def parse_object(text: str) -> Object:
    """Decode the object kstage passed; raises Err("object is not JSON: ...") otherwise."""
    try:
        return Object(json.loads(text), text)
    except ValueError as e:
        raise _err(f"object is not JSON: {e}") from None


def fail(message: str):
    """An exception to raise for the `err` answer: `raise kp.fail("...")`."""
    return _err(message)


def find(candidates: list, name):
    """The candidate named name; None when none is."""
    for c in candidates:
        if c.name == name:
            return c
    return None


def total_weight(candidates: list) -> int:
    """The sum of the positive weights."""
    return sum(c.weight for c in candidates if c.weight > 0)


def weighted(candidates: list, point: int):
    """The candidate at point (modulo the total) on the cumulative positive weights, in
    candidate order; with no positive weight, the one at point modulo their number."""
    total = total_weight(candidates)
    if total == 0:
        return candidates[point % len(candidates)]
    point %= total
    for c in candidates:
        if c.weight <= 0:
            continue
        if point < c.weight:
            return c
        point -= c.weight
    raise AssertionError("not reached: point < total")


def selection(chosen, delay_ms=None):
    """The `select` answer choosing a candidate (or a Stage name); `delay_ms=None` keeps
    kstage's delay."""
    from wit_world.imports.types import Selection

    stage = chosen if isinstance(chosen, str) else chosen.name
    return Selection(stage=stage, delay_ms=delay_ms)


def retry_after(ms: int):
    """Retry the same step after exactly ms milliseconds."""
    from wit_world.imports.types import Decision_RetryAfter

    return Decision_RetryAfter(ms)


def backoff():
    """Retry the same step after kstage's backoff."""
    from wit_world.imports.types import Decision_Backoff

    return Decision_Backoff()


def refresh():
    """Read the object again, then retry at once."""
    from wit_world.imports.types import Decision_Refresh

    return Decision_Refresh()


def drop(warn: bool = False):
    """Give up on the job; warn also records a Warning event."""
    from wit_world.imports.types import Decision_Drop

    return Decision_Drop(warn)


def info(name: str, version: str):
    """The `metadata.info` answer, with this SDK's interface version."""
    from wit_world.imports.types import PluginInfo

    return PluginInfo(name=name, version=version, interface_version=INTERFACE_VERSION)
