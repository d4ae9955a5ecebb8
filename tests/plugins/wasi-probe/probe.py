"""wasi-probe: a test-only kstage classifier plugin that tries to reach the host
through WASI (files, sockets, environment, stdout) and reports, through the decision
it returns, whether it could. kstage's tests use it to prove that WASI is denied unless
the plugin's config grants it.

`failure.message` is the command:

    file:PATH            read the file        ok -> retry-after(1), else drop(false)
    tcp:HOST:PORT        open a TCP stream    ok -> retry-after(2), else drop(false)
    env:NAME             read the variable    set -> retry-after(3), else drop(false)
    print:TEXT           print TEXT           -> backoff (whether or not stdout is granted)
    anything else        -> refresh

Every failure is caught: the plugin never traps.
"""

import os
import encodings.idna  # socket.getaddrinfo encodes host names with it; load it at build time
import socket
import sys

from wit_world import exports
from wit_world.imports.types import (
    Decision_Backoff,
    Decision_Drop,
    Decision_Refresh,
    Decision_RetryAfter,
    PluginInfo,
)

DENIED = Decision_Drop(False)


def _read_file(path: str) -> bool:
    with open(path, "rb") as f:
        f.read()
    return True


def _connect(target: str) -> bool:
    host, _, port = target.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    s = socket.create_connection((host, int(port)), timeout=0.25)
    s.close()
    return True


def _env(name: str) -> bool:
    # os.environ is filled from wasi:cli/environment when the component starts: it holds
    # what kstage grants, not the environment of the machine that built the component.
    return name in os.environ


def _print(text: str) -> None:
    print(text)
    sys.stdout.flush()


def _probe(action, ok: int):
    try:
        return Decision_RetryAfter(ok) if action() else DENIED
    except BaseException:  # denied, missing, refused, malformed: all the same here
        return DENIED


class Metadata(exports.Metadata):
    def info(self) -> PluginInfo:
        return PluginInfo(name="wasi-probe", version="0.1.0", interface_version="0.1.0")


class Classifier(exports.Classifier):
    def classify(self, failure):
        command, sep, arg = failure.message.partition(":")
        if sep:
            if command == "file":
                return _probe(lambda: _read_file(arg), 1)
            if command == "tcp":
                return _probe(lambda: _connect(arg), 2)
            if command == "env":
                return _probe(lambda: _env(arg), 3)
            if command == "print":
                try:
                    _print(arg)
                except BaseException:
                    pass
                return Decision_Backoff()
        return Decision_Refresh()
