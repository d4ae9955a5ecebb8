"""{{name}}: a kstage renderer plugin written in Python.

A Stage's template is JSON in which `${stage}` becomes the name of the Stage being
played and `${now}` kstage's current time; the rest is sent as written (kstage checks
that the result is JSON).
"""

import kstage_plugin as kp
from wit_world import exports
from wit_world.imports import host

NAME = "{{name}}"
VERSION = "0.1.0"


class Metadata(exports.Metadata):
    def info(self):
        return kp.info(NAME, VERSION)


class Renderer(exports.Renderer):
    def render(self, stage: str, template: str, object: str) -> str:
        # The object is at hand: `kp.parse_object(object).get(".metadata.name")`.
        # `raise kp.fail("...")` is the `err` answer.
        json = template.replace("${stage}", stage)
        if "${now}" in json:
            json = json.replace("${now}", host.now())
        return json
