"""Unit tests of kstage_plugin in plain Python: `python3 -m unittest` in this folder."""

import unittest
from types import SimpleNamespace as C

import kstage_plugin as kp

POD = """{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "web-0", "namespace": "default",
    "labels": {"app": "web", "app.kubernetes.io/name": "shop", "n": 3},
    "annotations": {"kstage.dev/x": "y"}},
  "spec": {"nodeName": null, "containers": [{"name": "c0", "ports": [{"containerPort": 8080}]}]},
  "status": {"conditions": [{"type": "Ready"}]}}"""


class ObjectTest(unittest.TestCase):
    def setUp(self):
        self.obj = kp.parse_object(POD)

    def test_paths(self):
        for path, want in {
            "metadata.labels.app": "web",
            ".metadata.labels.app": "web",
            'metadata.labels["app.kubernetes.io/name"]': "shop",
            '.metadata["labels"]["app"]': "web",
            "status.conditions.0.type": "Ready",
            ".status.conditions[0].type": "Ready",
            "spec.containers[0].ports.0.containerPort": 8080,
            "spec.nodeName": None,
        }.items():
            self.assertEqual(self.obj.get(path), want, path)
        for path in ["status.phase", "status.conditions.1", "status.conditions.x",
                     "metadata.name.x", "a..b", "a.", 'a["b', "a[x]", "a[-1]"]:
            self.assertIs(self.obj.get(path), kp.MISSING, path)
        self.assertIs(self.obj.get("."), self.obj.tree)
        self.assertEqual(self.obj.get("status.phase", "Pending"), "Pending")

    def test_metadata(self):
        self.assertEqual((self.obj.name, self.obj.namespace), ("web-0", "default"))
        self.assertEqual(self.obj.label("app"), "web")
        self.assertIsNone(self.obj.label("n"))
        self.assertEqual(self.obj.annotation("kstage.dev/x"), "y")
        self.assertEqual(self.obj.labels(), {"app": "web", "app.kubernetes.io/name": "shop"})
        self.assertEqual(kp.parse_object("[]").annotations(), {})
        with self.assertRaisesRegex(ValueError, "object is not JSON"):
            kp.parse_object("{")

    def test_candidates(self):
        cs = [C(name="a", weight=0), C(name="b", weight=2), C(name="c", weight=3)]
        self.assertEqual(kp.total_weight(cs), 5)
        self.assertEqual([kp.weighted(cs, p).name for p in range(6)], list("bbcccb"))
        self.assertEqual(kp.weighted([C(name="x", weight=0), C(name="y", weight=0)], 3).name, "y")
        self.assertEqual(kp.find(cs, "c").weight, 3)
        self.assertIsNone(kp.find(cs, "d"))


if __name__ == "__main__":
    unittest.main()
