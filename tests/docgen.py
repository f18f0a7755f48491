"""The generated parts of the docs: the configuration reference (from the typed config model) and the
figures the lab chapters quote from the examples' result.json. One command refreshes both after the
model or an example changed; tests/test_docs.py fails while either is stale.

    python -m tests.docgen            # rewrite docs/configuration.md and every figure in docs/ and README.md
    python -m tests.docgen --check    # exit 1 naming each stale page, change nothing

A figure is a marker around its value, naming the file, a path into its JSON and a format spec:

    <!-- fig examples/g6-kv-sim/result.json lengths[context_len=1024].measured_max_batch , -->83<!-- /fig -->

The file `ops.estimate` is no file: it is the JSON `python -m ops.estimate --all --json` prints, so every
cost figure the docs quote is the estimate's own:

    <!-- fig ops.estimate stacks[stack=g6].per_hour_from_up .3f -->0.436<!-- /fig -->

A path is dot-separated keys; `[3]` indexes a list and `[key=value,other=value]` takes the list's first
item whose keys have those values. The format spec is Python's (`,.0f`; `,` alone: thousands separators); a spec
ending in `%` scales a fraction as Python does (0.5 -> 50%).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from pydantic.fields import FieldInfo

from stacks.config import LabConfig
from stacks.stackfile import load_config, stack_names

REPO = Path(__file__).resolve().parents[1]
CONFIG_PAGE = REPO / "docs" / "configuration.md"
NAMESPACE = "gke-ml-labs"
# The path runs to the first space outside brackets: a filter's value may hold spaces ([name=node Ready]).
FIGURE = re.compile(
    r"<!-- fig (?P<file>\S+) (?P<path>(?:[^\s\[]|\[[^\]]*\])+)(?: (?P<spec>\S+))? -->(?P<value>.*?)<!-- /fig -->", re.S
)
OPENER = "<!-- fig "
_STEPS = re.compile(r"\.(?![^\[]*\])")
_STEP = re.compile(r"^(?P<key>[^\[\]]+)?(?:\[(?P<index>[^\]]+)\])?$")
# Fields the loader fills from outside the gke-ml-labs namespace.
_FROM_LOADER = {"stack": "the Pulumi stack name", "project": "`gcp:project`", "region": "`gcp:region`"}


class DocError(Exception):
    """A figure marker or page that cannot be generated; says which and why."""


# --- figures ---------------------------------------------------------------------------------------


def resolve(data: Any, path: str) -> Any:
    value = data
    for step in _STEPS.split(path):  # a dot inside brackets is a filter's value (rate=32.0), not a step
        m = _STEP.match(step)
        if not m:
            raise DocError(f"bad path step {step!r}")
        if m["key"]:
            if not isinstance(value, dict) or m["key"] not in value:
                raise DocError(f"no key {m['key']!r} at {step!r}")
            value = value[m["key"]]
        if m["index"] is not None:
            if not isinstance(value, list):
                raise DocError(f"{step!r} is not a list")
            if "=" in m["index"]:
                wanted = dict(cond.split("=", 1) for cond in m["index"].split(","))
                found = [v for v in value if isinstance(v, dict) and all(str(v.get(k)) == w for k, w in wanted.items())]
                if not found:
                    raise DocError(f"no item with {m['index']} in {step!r}")
                value = found[0]
            else:
                value = value[int(m["index"])]
    return value


ESTIMATE = "ops.estimate"


@cache
def _json(file: str) -> Any:
    if file == ESTIMATE:
        from ops.estimate import all_as_json

        return all_as_json()
    path = REPO / file
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DocError(f"cannot read {file}: {e}") from e


def figure(file: str, path: str, spec: str | None) -> str:
    value = resolve(_json(file), path)
    if value is None or isinstance(value, (dict, list)):
        raise DocError(f"{file} {path} is {'null' if value is None else 'not a single value'}: {str(value)[:80]}")
    try:
        return format(value, spec) if spec else str(value)
    except ValueError as e:
        raise DocError(f"{file} {path}: format {spec!r} does not apply to {value!r} ({e})") from None


def fill_figures(text: str, where: str) -> str:
    """`text` with every figure marker's value recomputed from its source; a marker that does not parse
    is an error, never a figure left unchecked."""
    if text.count(OPENER) != len(FIGURE.findall(text)):
        bad = next(i for i in range(len(text)) if text.startswith(OPENER, i) and not FIGURE.match(text, i))
        raise DocError(f"{where}:{text.count(chr(10), 0, bad) + 1}: a figure marker that does not parse")

    def one(m: re.Match[str]) -> str:
        try:
            value = figure(m["file"], m["path"], m["spec"])
        except DocError as e:
            line = text.count("\n", 0, m.start()) + 1
            raise DocError(f"{where}:{line}: {e}") from None
        spec = f" {m['spec']}" if m["spec"] else ""
        return f"<!-- fig {m['file']} {m['path']}{spec} -->{value}<!-- /fig -->"

    return FIGURE.sub(one, text)


def figure_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


# --- configuration reference -----------------------------------------------------------------------


def type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return " or ".join(type_text(a) for a in rest) + (", or null" if len(rest) < len(args) else "")
    if origin in (list, dict):
        return f"{origin.__name__} of " + ", ".join(type_text(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return getattr(annotation, "__name__", str(annotation))


def limits(info: FieldInfo) -> str:
    words = []
    for m in info.metadata:  # pydantic's Field(ge=..., pattern=...) constraints, one object each
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                words.append(f"{sign} {getattr(m, attr)}")
        if getattr(m, "pattern", None):
            words.append(f"matches `{m.pattern}`")
    return ", ".join(words)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _value(v: Any) -> str:
    return _cell(f"`{json.dumps(to_jsonable_python(v))}`" if not isinstance(v, str) else f"`{v}`")


def _labs_enabling(feature: str) -> list[str] | None:
    """The stacks whose validated config (stack file over the lab's defaults) has `feature` on; None for
    an object key that is not switched on and off (`cluster`), which matters in every lab."""
    if not hasattr(LabConfig.model_fields[feature].annotation(), "enabled"):
        return None
    return [stack for stack in stack_names() if getattr(load_config(stack, project="docs"), feature).enabled]


@cache
def _stack_files() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(REPO.glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
        out[path.name.split(".")[1]] = {k.removeprefix(f"{NAMESPACE}:"): v for k, v in config.items()}
    return out


def _set_in(key: str) -> list[str]:
    """The stack files whose config sets `key` (dotted: a field of an object key)."""
    head, _, field = key.partition(".")
    found = []
    for stack, config in _stack_files().items():
        value = config.get(head)
        if head in config and (not field or (isinstance(value, dict) and field.split("[")[0] in value)):
            found.append(stack)
    return found


def _defaults_per_choice(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """For a Literal field whose choice changes other fields' defaults (KServe's `runtime`): field ->
    {"runtime=sklearn": default, ...}, so the page gives the default of each choice."""
    out: dict[str, dict[str, Any]] = {}
    for name, info in model.model_fields.items():
        if typing.get_origin(info.annotation) is not Literal:
            continue
        variants = {}
        for choice in typing.get_args(info.annotation):
            try:
                variants[choice] = model(**{name: choice})
            except ValueError:  # a choice that needs more keys set
                continue
        for field in model.model_fields:
            values = {c: getattr(v, field) for c, v in variants.items()}
            if field != name and len({json.dumps(v, default=str) for v in values.values()}) > 1:
                out[field] = {f"{name}={c}": v for c, v in values.items()}
    return out


def _rows(fields: dict[str, FieldInfo], instance: BaseModel | None, prefix: str, labs: str) -> list[str]:
    """One table row per field; an object or a list of objects adds its fields' rows after its own."""
    per_choice = _defaults_per_choice(type(instance)) if instance is not None else {}
    rows = []
    for name, info in fields.items():
        key = f"{prefix}{name}"
        if name in per_choice:
            default = "; ".join(f"{c}: {_value(v)}" for c, v in per_choice[name].items())
        elif info.is_required():
            default = f"(set from {_FROM_LOADER[name]})" if name in _FROM_LOADER else "(required)"
        else:
            default = _value(getattr(instance, name) if instance is not None else info.get_default(call_default_factory=True))
        doc = info.description or ""
        set_in = _set_in(key) if prefix else []  # every stack file sets some base keys: no news there
        where = labs + (f" (set in {', '.join(f'Pulumi.{s}.yaml' for s in set_in)})" if set_in else "")
        rows.append(f"| `{key}` | {type_text(info.annotation)} | {default} | {_cell(limits(info))} | {where} | {_cell(doc)} |")
        inner = _inner_model(info.annotation)
        if inner is not None:  # e.g. tenancy.tenants: each item's fields (required ones have no default)
            item = "[]" if typing.get_origin(info.annotation) is list else ""
            rows += _rows(inner.model_fields, None, f"{key}{item}.", labs)
    return rows


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


HEADER = "| key | type | default | limits | labs | what it does |\n|---|---|---|---|---|---|"


def config_reference() -> str:
    """docs/configuration.md, from LabConfig and the feature models it holds."""
    base = {n: f for n, f in LabConfig.model_fields.items() if _inner_model(f.annotation) is None}
    features = {n: _inner_model(f.annotation) for n, f in LabConfig.model_fields.items() if n not in base}
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from stacks/config.py and the feature models by `python -m tests.docgen`; do not edit. -->",
        "",
        f"Every key a `Pulumi.<lab>.yaml` may set, in the `{NAMESPACE}:` namespace, as the typed config model",
        "(`stacks/config.py`) checks it before any resource exists: an unknown key fails with the nearest valid",
        "name, and the rules that span keys (a quota against the GPU pool, zones in the region, a sharing mode",
        "against the driver install) are checked there too, each naming the key and what is allowed.",
        "Set an object's field with `pulumi config set --path vllm.max_num_seqs 64 -s g6`. \"labs\" says where",
        "a key matters: the base keys in every lab, a feature's keys in the stacks whose config switches it on",
        "(by the lab's defaults in `stacks/labs.py` or the stack file); any lab may switch a feature on. A stack",
        "file that sets one of a feature's keys is named.",
        "",
        "## Base cluster and GPU pool",
        "",
        HEADER,
        *_rows(base, None, "", "all"),
        "",
    ]
    for name, model in features.items():
        on = _labs_enabling(name)
        labs = "all" if on is None else ", ".join(on) or "none by default"
        doc = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())
        lines += [f"## `{name}`", "", doc, "", HEADER, *_rows(model.model_fields, model(), f"{name}.", labs), ""]
    return "\n".join(lines)


# --- the command -----------------------------------------------------------------------------------


def pages() -> dict[Path, str]:
    """Every generated page as it should read now: the configuration reference, and each page with
    figures with its figures refilled."""
    out = {CONFIG_PAGE: config_reference()}
    for page in figure_pages():
        text = page.read_text()
        if FIGURE.search(text):
            out[page] = fill_figures(text, str(page.relative_to(REPO)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.docgen", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only report stale pages (exit 1 if any)")
    args = p.parse_args(argv)
    try:
        wanted = pages()
    except DocError as e:
        print(f"docgen: {e}", file=sys.stderr)
        return 2
    changed = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    for path in changed:
        if args.check:
            print(f"stale: {path.relative_to(REPO)}", file=sys.stderr)
        else:
            path.write_text(wanted[path])
            print(f"wrote {path.relative_to(REPO)}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
