#!/usr/bin/env python3
"""Writes src/apiserver/protobuf_schema.json: the protobuf messages of the kinds the
embedded API server serves, as its protobuf decoder reads them.

Field numbers and wire types come from the k8s-pb crate (prost code generated from
Kubernetes' generated.proto files); JSON field names and which fields are required
(serialised even when empty) from the k8s-openapi crate, which kstage depends on.

Usage: scripts/protobuf-schema.py K8S_PB_SRC K8S_OPENAPI_SRC/v1_NN > src/apiserver/protobuf_schema.json
(both from ~/.cargo/registry/src/*/, after `cargo fetch`).
"""

import json
import os
import re
import sys

# Packages (k8s-pb module paths) whose top-level kinds the server decodes.
ROOTS = [
    ("api/core/v1", ["Namespace", "Node", "Pod", "Event", "ConfigMap", "Secret", "Service",
                     "ServiceAccount"]),
    ("api/events/v1", ["Event"]),
    ("api/coordination/v1", ["Lease"]),
    ("api/apps/v1", ["Deployment"]),
    ("api/batch/v1", ["Job"]),
    ("api/rbac/v1", ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]),
    ("api/policy/v1", ["PodDisruptionBudget"]),
    ("api/flowcontrol/v1", ["FlowSchema", "PriorityLevelConfiguration"]),
    ("api/autoscaling/v1", ["Scale"]),
    ("api/authorization/v1", ["SelfSubjectAccessReview", "SelfSubjectRulesReview"]),
    ("api/authentication/v1", ["SelfSubjectReview"]),
    ("apimachinery/pkg/apis/meta/v1", ["DeleteOptions"]),
    ("apimachinery/pkg/runtime", ["Unknown"]),
]

ATTR = re.compile(r'#\[prost\((?P<kind>[a-z0-9_]+)(?: = "(?P<arg>[^"]*)")?(?P<rest>[^\]]*)\)\]')
TAG = re.compile(r'tag = "(\d+)"')
FIELD = re.compile(r'pub (?:r#)?([a-z0-9_]+):\s*(.*?),?$')


def package_of(module):
    return "k8s.io." + module.replace("/", ".")


def parse_pb(root):
    """{full message name: [(tag, rust field, kind, arg, repeated, type path)]}"""
    messages = {}
    for dirpath, _, files in os.walk(root):
        if "mod.rs" not in files:
            continue
        module = os.path.relpath(dirpath, root)
        text = open(os.path.join(dirpath, "mod.rs")).read()
        for m in re.finditer(r"pub struct (\w+) \{(\}|.*?\n\})", text, re.S):
            name, body = m.group(1), m.group(2)
            fields = []
            lines = [l.strip() for l in body.split("\n")]
            i = 0
            while i < len(lines):
                a = ATTR.match(lines[i])
                if not a:
                    i += 1
                    continue
                # the field declaration may wrap over lines
                j = i + 1
                decl = ""
                while j < len(lines) and not (decl.rstrip().endswith(",") and decl.count("<") == decl.count(">")):
                    if not lines[j].startswith("#") and not lines[j].startswith("///"):
                        decl += lines[j] + " "
                    j += 1
                f = FIELD.match(decl.strip())
                rust, ty = f.group(1), f.group(2)
                kind, arg, rest = a.group("kind"), a.group("arg"), a.group("rest")
                tag = int(TAG.search(rest).group(1))
                repeated = "repeated" in rest
                target = None
                if kind == "message" or (kind == "btree_map" and arg.endswith("message")):
                    path = re.findall(r"((?:super::|self::)*(?:[a-z_0-9]+::)*[A-Z]\w*)", ty)
                    path = [p for p in path if not re.match(r"(prost|alloc|core|std)::|(Option|Vec|BTreeMap|String|Box)$", p)]
                    target = resolve(module, path[-1])
                fields.append((tag, rust, kind, arg, repeated, target))
                i = j
            messages[package_of(module) + "." + name] = fields
    return messages


def resolve(module, path):
    parts = path.split("::")
    here = module.split("/")
    while parts and parts[0] == "super":
        here = here[:-1]
        parts = parts[1:]
    return package_of("/".join(here + parts[:-1])) + "." + parts[-1]


def parse_openapi(root):
    """{(module, lower struct name): {rust field: (json name, required)}}"""
    out = {}
    for dirpath, _, files in os.walk(root):
        module = os.path.relpath(dirpath, root)
        for f in files:
            if not f.endswith(".rs") or f == "mod.rs":
                continue
            text = open(os.path.join(dirpath, f)).read()
            s = re.search(r"pub struct (\w+)(?:<[^>]*>)? \{(.*?)\n\}", text, re.S)
            if not s:
                continue
            types = dict(re.findall(r"pub (?:r#)?([a-z0-9_]+): (.*?),\n", s.group(2) + "\n"))
            names = {}
            for json_name, rust in re.findall(r'"([^"]+)" => Field::Key_([a-z0-9_]+),', text):
                names[rust.rstrip("_")] = (json_name, not types.get(rust, "Option").startswith("Option"))
            out[(module, s.group(1).lower())] = names
    return out


def camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def main():
    pb = parse_pb(sys.argv[1])
    openapi = parse_openapi(sys.argv[2])
    wanted = []
    for module, kinds in ROOTS:
        wanted += [package_of(module) + "." + k for k in kinds]
    seen = {}
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        fields = pb[name]
        package, _, short = name.rpartition(".")
        module = package[len("k8s.io."):].replace(".", "/")
        names = openapi.get((module, short.lower()), {})
        own = bool(names)
        # k8s-openapi folds some messages into others (VolumeSource into Volume): their
        # fields' names are looked up across all types.
        if not names:
            names = {rust: (json_name, False) for (json_name, _), rust in ((v, r) for t in openapi.values() for r, v in t.items())}
        out = []
        for tag, rust, kind, arg, repeated, target in fields:
            json_name, required = names.get(rust, (camel(rust), False))
            # A Go struct embedded inline (Volume's VolumeSource): its fields are the
            # parent's in JSON, so k8s-openapi has no field of its name.
            inline = (
                own
                and target is not None
                and rust not in names
                and all(f[1].rstrip("_") in names for f in pb[target])
            )
            if kind == "btree_map":
                kind = "map_" + arg.split(", ")[1]
            elif kind == "bytes":
                kind = "bytes"
            field = {"n": tag, "json": json_name, "type": kind}
            if repeated:
                field["repeated"] = True
            if required:
                field["required"] = True
            if inline:
                field["inline"] = True
            if target:
                field["message"] = target
                wanted.append(target)
            out.append(field)
        seen[name] = out
    json.dump({"messages": dict(sorted(seen.items()))}, sys.stdout, indent=None, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")


main()
