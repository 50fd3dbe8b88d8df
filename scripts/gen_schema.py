"""Regenerates jaxsim/mjcf/schema.json from MuJoCo's MJCF grammar description.

Usage: python scripts/gen_schema.py PATH/TO/mjcf.schema

The output is a compact data table (element -> attributes with type, arity, default, flags;
element -> children by XML tag) that our parser validates against. Only the facts of the
format are kept; none of the grammar file's text is.
"""

import json
import re
import sys


def parse_type(t):
    m = re.match(r"(\w+)(?:<(\w+)>)?(?:\[(.*)\])?$", t)
    base, ns, arity = m.group(1), m.group(2), m.group(3)
    if arity is None:
        lo = hi = 1
    elif arity == "":
        lo, hi = 0, None
    elif ".." in arity:
        a, b = arity.split("..")
        lo = int(a)
        hi = {"mjNREF": 2, "mjNIMP": 5, "mjNDYN": 10, "mjNGAIN": 10, "mjNBIAS": 10}.get(b)
        hi = int(b) if hi is None and b.isdigit() else hi
    else:
        lo = hi = int(arity)
    return base, ns, lo, hi


def parse_default(s):
    s = s.strip()
    if s.startswith("{"):
        return tuple(float(x) for x in s.strip("{}").split(","))
    try:
        return float(s)
    except ValueError:
        return s


def main(path):
    enums, groups, elements = {}, {}, {}
    cur = None
    kind = None
    for raw in open(path):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        s = line.strip()
        if s == "}":
            cur = None
            continue
        m = re.match(r"enum (\w+)", s)
        if m and s.endswith("{"):
            cur = enums.setdefault(m.group(1), {})
            kind = "enum"
            continue
        m = re.match(r"group (\w+)", s)
        if m and s.endswith("{"):
            cur = groups.setdefault(m.group(1), {"attrs": {}, "uses": [], "children": {}})
            kind = "group"
            continue
        m = re.match(r"element (\w+)(.*)\{", s)
        if m:
            rest = m.group(2)
            xm = re.search(r"xml=(\w+)", rest)
            am = re.search(r"alias=(\w+)", rest)
            cur = elements.setdefault(
                m.group(1),
                {"tag": xm.group(1) if xm else m.group(1), "alias": am.group(1) if am else None,
                 "attrs": {}, "uses": [], "children": {}},
            )
            kind = "element"
            continue
        if cur is None:
            continue
        if kind == "enum":
            m = re.match(r'"?([^"=\s]+)"?\s*=\s*(\S+)', s)
            if m:
                cur[m.group(1)] = m.group(2)
            continue
        if s.startswith("use "):
            cur["uses"].append(s.split()[1])
            continue
        if s.startswith("child "):
            parts = s.split()
            cur["children"][parts[1]] = parts[2] if len(parts) > 2 else "*"
            continue
        if s.startswith(("exclusive", "together", "requires", "oneof", "set ")):
            cur.setdefault("rules", []).append(s)
            continue
        m = re.match(r"(\w+)\s*:\s*([\w<>\[\].]+)\s*(?:=\s*(\{[^}]*\}|[^\s(]+))?\s*(\((.*)\))?", s)
        if m:
            name, t, dflt, facets = m.group(1), m.group(2), m.group(3), m.group(5) or ""
            base, ns, lo, hi = parse_type(t)
            flags = []
            for f in ("required", "nodefault"):
                if re.search(rf"\b{f}\b", facets):
                    flags.append(f)
            enum_keys = tuple(enums.get(ns, {}).keys()) if base in ("enum", "flags") else None
            # (type, namespace, min arity, max arity, default, flags, enum keywords)
            cur["attrs"][name] = (base, ns, lo, hi,
                                  parse_default(dflt) if dflt is not None else None,
                                  tuple(flags), enum_keys)

    def expand(e):
        attrs = {}
        for u in e["uses"]:
            attrs.update(expand(groups[u]))
        attrs.update(e["attrs"])
        return attrs

    out = {}
    for name, e in elements.items():
        attrs = expand(e)
        children = {}
        for c in e["children"]:
            tag = elements[c]["tag"] if c in elements else c
            children[tag] = c
        out[name] = {"tag": e["tag"], "alias": e["alias"], "attrs": attrs, "children": children,
                     "rules": tuple(e.get("rules", ()))}
    # One element per line: a JSON data file shipped with the package.
    with open("jaxsim/mjcf/schema.json", "w") as fh:
        fh.write("{\n")
        rows = [f"{json.dumps(name)}: {json.dumps(e)}" for name, e in out.items()]
        fh.write(",\n".join(rows))
        fh.write("\n}\n")


if __name__ == "__main__":
    main(sys.argv[1])
