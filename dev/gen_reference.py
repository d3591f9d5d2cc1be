"""Write docs/reference.md from the code: every operator, sensor, trigger and hook in the
modules `get_provider_info()` lists, with its import path, summary, parameters (default,
templated) and XCom result. Generated rather than written by hand so it cannot fall behind
the classes; tests/test_reference_doc.py fails when the file and the code disagree.

    .venv/bin/python dev/gen_reference.py          # rewrite docs/reference.md
    .venv/bin/python dev/gen_reference.py --check  # exit 1 when it is stale or a :param is missing
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "docs" / "reference.md"
COMMAND = ".venv/bin/python dev/gen_reference.py"

# Provider-info keys in the order the reference shows them, with their section titles.
KINDS = (("operators", "Operators"), ("sensors", "Sensors"), ("triggers", "Triggers"), ("hooks", "Hooks"))
PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")
FIELD = re.compile(r"^:(\w+)(\s[^:]*)?:")
TEMPLATED = re.compile(r"\s*\(templated\)")


def airflow_bases() -> tuple[type, ...]:
    """The Airflow classes a provider class extends; their own arguments are Airflow's to document."""
    from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    return ApprovalOperator, HITLOperator, BaseSensorOperator, BaseOperator, BaseTrigger, BaseHook


@dataclass
class Param:
    name: str
    default: str  # as it reads in the source, or "required"
    templated: bool | None  # None: the class has no template_fields (hooks, triggers)
    doc: str | None  # None: no :param line anywhere in the class's own hierarchy
    owner: str  # the class whose __init__ takes it


@dataclass
class ClassDoc:
    kind: str
    module: str
    name: str
    summary: str
    params: list[Param] = field(default_factory=list)
    returns: str | None = None
    connection: str | None = None
    marked_templated: set[str] = field(default_factory=set)  # params whose :param says (templated)
    documented_unknown: list[str] = field(default_factory=list)  # :param lines naming no argument


def _docstring(cls: type) -> str:
    """The class's own docstring (not an inherited one), dedented."""
    doc = vars(cls).get("__doc__")
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def parse_docstring(doc: str) -> tuple[list[str], dict[str, str], str | None]:
    """(prose paragraphs before the fields, {param: description}, `:returns:` text)."""
    prose: list[str] = []
    params: dict[str, str] = {}
    returns: str | None = None
    paragraph: list[str] = []
    current: list[str] | None = None  # the field being continued
    name = ""
    fields: list[tuple[str, list[str]]] = []
    for line in doc.splitlines():
        m = PARAM.match(line)
        if m or FIELD.match(line):
            if paragraph:
                prose.append(" ".join(paragraph))
                paragraph = []
            name = m.group(1) if m else "return:" + line.split(":", 2)[1]
            current = [m.group(2) if m else line.split(":", 2)[2].strip()]
            fields.append((name, current))
        elif current is not None and line.startswith((" ", "\t")):
            current.append(line.strip())
        elif current is not None and line.strip():
            current = None
            paragraph.append(line.strip())
        elif line.strip():
            paragraph.append(line.strip())
        else:
            current = None
            if paragraph:
                prose.append(" ".join(paragraph))
                paragraph = []
    if paragraph:
        prose.append(" ".join(paragraph))
    for name, text in fields:
        joined = " ".join(t for t in text if t)
        if name.startswith("return:"):
            if name in ("return:return", "return:returns"):
                returns = joined
        else:
            params.setdefault(name, joined)
    return prose, params, returns


def sentences(paragraph: str) -> list[str]:
    """The paragraph cut at each full stop outside `code`."""
    out, start, in_code = [], 0, False
    for i, ch in enumerate(paragraph):
        if ch == "`":
            in_code = not in_code
        elif ch == "." and not in_code and (i + 1 == len(paragraph) or paragraph[i + 1] == " "):
            out.append(paragraph[start:i + 1].strip())
            start = i + 1
    if paragraph[start:].strip():
        out.append(paragraph[start:].strip())
    return out


def returns_sentence(prose: list[str]) -> str | None:
    """The docstring's sentence that starts with "Returns": what the task returns (its XCom)."""
    for paragraph in prose:
        for sentence in sentences(paragraph):
            if sentence.startswith("Returns "):
                return sentence
    return None


def summary(prose: list[str], returns: str | None) -> str:
    """The docstring's first paragraph, less the sentence on what it returns (shown apart)."""
    if not prose:
        return ""
    return " ".join(s for s in sentences(prose[0]) if s != returns)


def _source_defaults(func: Any) -> dict[str, str]:
    """Each argument's default as written in the source when it is an expression
    (`timedelta(minutes=10)`, a config lookup); literals and names are left to their value."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError, SyntaxError):
        return {}
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return {}
    args = node.args
    out: dict[str, str] = {}
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
             *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    for arg, default in pairs:
        if default is not None and not isinstance(default, ast.Constant | ast.Name):
            out[arg.arg] = ast.get_source_segment(source, default) or ""
    return out


def render_default(value: Any, source: str | None) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    if not source:
        return repr(value)
    return " ".join(source.split())


def own_classes(cls: type) -> list[type]:
    """The classes of `cls`'s hierarchy below Airflow's base classes (ours, and other
    providers' such as KafkaBaseHook): their `__init__` arguments are the class's own."""
    airflow_mro = {k for base in airflow_bases() for k in base.__mro__}
    return [k for k in cls.__mro__ if k not in airflow_mro]


def describe(cls: type, kind: str) -> ClassDoc:
    own = own_classes(cls)
    prose, _, returns_field = parse_docstring(_docstring(cls))
    docs: dict[str, str] = {}
    order: list[str] = []
    for k in own:  # the nearest class that documents a parameter wins
        _, params, _ = parse_docstring(_docstring(k))
        for name, text in params.items():
            if name not in docs:
                docs[name] = text
                order.append(name)

    signature: dict[str, tuple[Any, str | None, str]] = {}
    for k in own:
        init = vars(k).get("__init__")
        if init is None:
            continue
        sources = _source_defaults(init)
        for p in inspect.signature(init).parameters.values():
            if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in signature:
                continue
            signature[p.name] = (p.default, sources.get(p.name), k.__name__)

    template_fields = getattr(cls, "template_fields", None) if kind in ("operators", "sensors") else None
    names = [n for n in order if n in signature] + [n for n in signature if n not in docs]
    params = []
    for name in names:
        default, source, owner = signature[name]
        text = docs.get(name)
        params.append(Param(
            name=name, default=render_default(default, source),
            templated=None if template_fields is None else name in template_fields,
            doc=None if text is None else TEMPLATED.sub("", text).replace(" .", ".").strip(), owner=owner,
        ))

    connection = None
    if kind == "hooks" and getattr(cls, "conn_type", None):
        connection = (
            f"connection type `{cls.conn_type}`; its id is `{cls.conn_name_attr}` "
            f"(default `{cls.default_conn_name}`)"
        )
    returns = returns_sentence(prose)
    return ClassDoc(
        kind=kind, module=cls.__module__, name=cls.__name__, summary=summary(prose, returns), params=params,
        returns=returns_field or (returns if kind in ("operators", "sensors") else None),
        connection=connection,
        marked_templated={n for n, t in docs.items() if TEMPLATED.search(t)},
        documented_unknown=[n for n in order if n not in signature],
    )


def _base_only(cls: type, bases: tuple[type, ...]) -> bool:
    """An operator base that is no task of its own (operators/base.py): none of the project's
    classes in its hierarchy defines `execute`; its subclasses document what it takes."""
    return any(issubclass(cls, b) for b in bases if b.__name__ == "BaseOperator") and not any(
        "execute" in vars(c) for c in cls.__mro__ if c.__module__.startswith("airflow_provider_streamstate"))


def collect() -> list[ClassDoc]:
    """Every public provider class in the modules provider info lists, in its order."""
    from airflow_provider_streamstate.get_provider_info import get_provider_info

    info = get_provider_info()
    bases = airflow_bases()
    out: list[ClassDoc] = []
    for kind, _ in KINDS:
        for entry in info.get(kind, []):
            for module_name in entry["python-modules"]:
                module = importlib.import_module(module_name)
                for name, obj in vars(module).items():
                    if (inspect.isclass(obj) and obj.__module__ == module_name and not name.startswith("_")
                            and issubclass(obj, bases) and obj not in bases and not _base_only(obj, bases)):
                        out.append(describe(obj, kind))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(classes: list[ClassDoc] | None = None) -> str:
    classes = collect() if classes is None else classes
    lines = [
        "# Reference: operators, sensors, triggers and hooks",
        "",
        f"<!-- Generated by `{COMMAND}` from the classes that provider info lists; do not edit by hand. -->",
        "",
        "Every class of the provider, as the code defines it: import path, what it is for, its",
        "arguments (default as written in `__init__`; *templated* when it is one of the class's",
        "`template_fields`, so it may hold Jinja such as `\"{{ params.stream }}\"`), and for",
        "operators and sensors what the task returns as its XCom. Operators and sensors also take",
        "Airflow's own arguments (`task_id`, `retries`, `execution_timeout`; sensors `poke_interval`,",
        "`timeout`, `mode`), not repeated here. The overview is [airflow.md](airflow.md); your",
        "first DAG with them is [first-dag.md](first-dag.md).",
        "",
    ]
    for kind, title in KINDS:
        of_kind = [c for c in classes if c.kind == kind]
        if not of_kind:
            continue
        lines += [f"## {title}", ""]
        lines += [f"- [`{c.name}`](#{c.name.lower()})" for c in of_kind]
        lines.append("")
        for c in of_kind:
            lines += [f"### {c.name}", "", f"`from {c.module} import {c.name}`", "", c.summary or "(no docstring)", ""]
            if c.connection:
                lines += [f"Connection: {c.connection}.", ""]
            if c.params:
                templated = any(p.templated is not None for p in c.params)
                header = "| parameter | default |" + (" templated |" if templated else "") + " description |"
                rule = "| --- | --- |" + (" --- |" if templated else "") + " --- |"
                lines += [header, rule]
                for p in c.params:
                    cells = [f"`{p.name}`", _cell(f"`{p.default}`" if p.default != "required" else "required")]
                    if templated:
                        cells.append("yes" if p.templated else "")
                    cells.append(_cell(p.doc) if p.doc is not None else "**undocumented**")
                    lines.append("| " + " | ".join(cells) + " |")
                lines.append("")
            if c.returns:
                lines += [f"XCom: {c.returns}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def problems(classes: list[ClassDoc] | None = None) -> list[str]:
    """What the docstrings get wrong: an argument without a `:param` line, a `:param` naming
    no argument, and `(templated)` marks that disagree with `template_fields`."""
    classes = collect() if classes is None else classes
    out = []
    for c in classes:
        where = f"{c.module}.{c.name}"
        out += [f"{where}: __init__ argument {p.name!r} (of {p.owner}) has no :param line"
                for p in c.params if p.doc is None]
        out += [f"{where}: :param {n} names no __init__ argument" for n in c.documented_unknown]
        for p in c.params:
            if p.templated is None or p.doc is None:
                continue
            if p.templated and p.name not in c.marked_templated:
                out.append(f"{where}: {p.name!r} is in template_fields but its :param does not say (templated)")
            if not p.templated and p.name in c.marked_templated:
                out.append(f"{where}: :param {p.name} says (templated) but it is not in template_fields")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when stale or incomplete")
    args = parser.parse_args(argv)
    classes = collect()
    text = render(classes)
    issues = problems(classes)
    for issue in issues:
        print(issue, file=sys.stderr)
    if args.check:
        stale = not OUTPUT.exists() or OUTPUT.read_text() != text
        if stale:
            print(f"{OUTPUT.relative_to(REPO)} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if stale or issues else 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(REPO)}: {len(classes)} classes")
    return 1 if issues else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
