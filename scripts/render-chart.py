#!/usr/bin/env python3
"""Render deploy/helm/s3flash-csi as `helm template` would, for machines without helm (Debian
has no package of it): the subset of Go templates the chart uses, and nothing more:

    {{ .Values.a.b }}  {{ .Release.Namespace }}  {{ .Release.Name }}  {{ .Chart.Version }}
    {{ X | quote }}    {{ toYaml X | nindent N }}
    {{ if X }} ... {{ else }} ... {{ end }}        ({{- and -}} trim whitespace as in Go)

Anything else in a template is an error, so a chart edit that needs real helm says so.

    python3 scripts/render-chart.py [--namespace NS] [--set a.b=v ...] [CHART]   > out.yaml
"""

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "s3flash-csi"
_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


class TemplateError(Exception):
    pass


def _tokens(text):
    out, pos = [], 0
    for m in _ACTION.finditer(text):
        lit = text[pos:m.start()]
        if m.group(1):
            lit = lit.rstrip(" \t\n")
        out.append(("text", lit))
        out.append(("action", m.group(2), bool(m.group(3))))
        pos = m.end()
    out.append(("text", text[pos:]))
    # a trailing "-}}" trims the whitespace of the text after it
    for i, t in enumerate(out):
        if t[0] == "action" and t[2] and i + 1 < len(out):
            out[i + 1] = ("text", out[i + 1][1].lstrip(" \t\n"))
    return out


def _parse(tokens, i=0, stop=("end",)):
    """[node] until one of `stop`; returns (nodes, index of the stop token, its word)."""
    nodes = []
    while i < len(tokens):
        t = tokens[i]
        if t[0] == "text":
            nodes.append(("text", t[1]))
            i += 1
            continue
        expr = t[1]
        word = expr.split()[0] if expr else ""
        if word in stop:
            return nodes, i, word
        if word == "if":
            then, i, w = _parse(tokens, i + 1, ("else", "end"))
            other = []
            if w == "else":
                other, i, _ = _parse(tokens, i + 1, ("end",))
            nodes.append(("if", expr[2:].strip(), then, other))
            i += 1
            continue
        if word in ("else", "end", "range", "with", "define", "include", "template"):
            raise TemplateError("unsupported action {{ %s }}" % expr)
        nodes.append(("expr", expr))
        i += 1
    return nodes, i, None


class Renderer:
    def __init__(self, values, namespace, release, chart):
        self.scope = {"Values": values, "Release": {"Namespace": namespace, "Name": release},
                      "Chart": chart}

    def lookup(self, ref):
        if not ref.startswith("."):
            if ref.startswith('"'):
                return json.loads(ref)
            raise TemplateError("unsupported operand %r" % ref)
        v = self.scope
        for part in ref[1:].split("."):
            if not isinstance(v, dict):
                raise TemplateError("%s: %r is not a map" % (ref, part))
            v = v.get(part[0].upper() + part[1:] if v is self.scope else part)
        return v

    def value(self, expr):
        stages = [s.strip() for s in expr.split("|")]
        first = stages[0].split()
        if first[0] == "toYaml":
            v = self.lookup(first[1])
            v = "" if v in (None, {}, []) else yaml.safe_dump(v, default_flow_style=False,
                                                              sort_keys=False).rstrip("\n")
            if v == "":
                v = "{}" if isinstance(self.lookup(first[1]), dict) else "[]"
        elif len(first) == 1:
            v = self.lookup(first[0])
        else:
            raise TemplateError("unsupported expression %r" % stages[0])
        for s in stages[1:]:
            w = s.split()
            if w == ["quote"]:
                v = json.dumps("" if v is None else str(v))
            elif w[0] == "nindent" and len(w) == 2:
                pad = " " * int(w[1])
                v = "\n" + "\n".join(pad + line if line else line for line in str(v).split("\n"))
            else:
                raise TemplateError("unsupported function %r" % s)
        if v is None:
            raise TemplateError("%s has no value" % expr)
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)

    def render(self, nodes):
        out = []
        for n in nodes:
            if n[0] == "text":
                out.append(n[1])
            elif n[0] == "expr":
                out.append(self.value(n[1]))
            else:
                cond = self.lookup(n[1]) if n[1].startswith(".") else None
                out.append(self.render(n[2] if cond else n[3]))
        return "".join(out)


def _set(values, assignment):
    path, _, raw = assignment.partition("=")
    v = values
    keys = path.split(".")
    for k in keys[:-1]:
        v = v.setdefault(k, {})
    v[keys[-1]] = yaml.safe_load(raw)


def render(chart=CHART, namespace="kube-system", release="s3flash-csi", sets=()):
    """The chart's documents as one YAML stream, as `helm template` prints them."""
    chart = Path(chart)
    values = yaml.safe_load((chart / "values.yaml").read_text())
    for s in sets:
        _set(values, s)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    r = Renderer(values, namespace, release, {"Name": meta["name"], "Version": meta["version"],
                                              "AppVersion": meta.get("appVersion")})
    parts = []
    for t in sorted((chart / "templates").glob("*.yaml")):
        try:
            nodes, i, w = _parse(_tokens(t.read_text()))
            if w is not None:
                raise TemplateError("{{ %s }} without its if" % w)
            body = r.render(nodes).strip("\n")
        except TemplateError as e:
            raise TemplateError("%s: %s" % (t.name, e))
        if body.strip():
            parts.append("---\n# Source: %s/templates/%s\n%s\n" % (meta["name"], t.name, body))
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chart", nargs="?", default=str(CHART))
    ap.add_argument("--namespace", default="kube-system")
    ap.add_argument("--release", default="s3flash-csi")
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args()
    try:
        sys.stdout.write(render(a.chart, a.namespace, a.release, a.set))
    except TemplateError as e:
        sys.exit("render-chart: %s" % e)


if __name__ == "__main__":
    main()
