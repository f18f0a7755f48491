"""The docs a newcomer reads: a README under 15 KB, one chapter per lab in one shape, links and images
that resolve, a configuration reference and quoted figures that cannot drift from the model and the
examples (tests/docgen.py regenerates both), and the commands they show."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import docgen
import pytest
from markdown_it import MarkdownIt
from pydantic import BaseModel

from stacks.config import LabConfig
from stacks.labs import LABS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CHAPTERS = {lab: REPO / "docs" / "labs" / f"{lab}.md" for lab in LABS}
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]
# The shape every chapter shares (the project's seed: each lab a chapter), in this order.
CHAPTER_SECTIONS = [
    "What you build",
    "What you measure, and why it matters",
    "Commands",
    "What the shipped example shows",
    "What it costs",
    "Tear down, and prove it",
    "What it is not evidence of",
    "What can go wrong first time",
]
README_SECTIONS = ["On a fresh machine", "The labs", "A session, start to finish", "Read next", "Layout"]
LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`[^`\n]*`")
PROJECT = ("benchmarks", "stacks", "ops", "tests")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# Offline commands of the docs that take seconds: run for real. Every other command is checked against
# its module's --help (each flag it shows must exist), never run (they need a cluster or take minutes).
SIZING = "python -m benchmarks.sizing --model Qwen/Qwen2.5-1.5B-Instruct --gpu l4 --max-model-len 4096 --gpu-memory-utilization 0.9"
RUN = ["python -m stacks.plan dev", "python -m ops.estimate --all", "python -m benchmarks --help",
       "python -m tests.docgen --check", SIZING]  # fmt: skip
# Figures a page quotes from a command's output: (page, command) -> what both must say.
# (The cost figures are quoted through markers from `python -m ops.estimate --all --json`: test_cost_figures_...)
QUOTED = {("docs/labs/g6.md", SIZING): ["2.88 GiB", "28,672 B", "580,304", "141.68"]}  # fmt: skip


def _sections(text: str) -> list[str]:
    return [line[3:].strip() for line in FENCE.sub("", text).splitlines() if line.startswith("## ")]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_readme_is_short_and_has_its_sections():
    text = README.read_text()
    assert len(text.encode()) <= 15_000, f"README.md is {len(text.encode()):,} bytes; keep it under 15 KB"
    assert _sections(text) == README_SECTIONS
    assert "**Cost warning.**" in text.split("## On a fresh machine")[0]
    fresh = FENCE.findall(text.split("## On a fresh machine")[1].split("## ")[0])[0]
    assert [line.split()[1] for line in fresh.splitlines()[1:-1]] == ["test", "g6-sim"]


def test_the_labs_table_links_every_chapter():
    table = README.read_text().split("## The labs")[1].split("## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert [re.match(r"\| \[(\w+)\]\(docs/labs/(\w+)\.md\)", r).groups() for r in rows] == [(lab, lab) for lab in LABS]


@pytest.mark.parametrize("lab", list(LABS))
def test_every_lab_has_a_chapter_in_the_common_shape(lab):
    text = CHAPTERS[lab].read_text()
    assert text.startswith(f"# {lab}: ")
    assert _sections(text) == CHAPTER_SECTIONS
    for section in text.split("\n## ")[1:]:
        assert section.split("\n", 1)[1].strip(), f"{lab}: section {section.splitlines()[0]!r} is empty"


@pytest.mark.parametrize("lab", [lab for lab in LABS if (REPO / "examples" / lab / "result.json").exists()])
def test_a_chapter_quotes_its_example_through_figures(lab):
    """A lab with an example quotes it through markers, so regenerating the example without the doc fails."""
    assert f"<!-- fig examples/{lab}/result.json " in CHAPTERS[lab].read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_and_image_resolves(page):
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    broken = []
    for image, target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # a web address: not checked offline
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif image and dest.suffix != ".png":
            broken.append(f"{target}: an embedded image that is not a PNG")
        elif anchor and (dest.is_dir() or anchor not in _anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert broken == []


def test_the_configuration_reference_is_the_models():
    assert (REPO / "docs" / "configuration.md").read_text() == docgen.config_reference(), (
        "docs/configuration.md differs from the config model: run `python -m tests.docgen`"
    )


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        out.append(prefix + name)
        for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                out += _keys(arg, f"{prefix}{name}{'[].' if 'list' in str(info.annotation) else '.'}")
    return out


def test_the_reference_names_every_key_of_the_model_and_no_other():
    """Independent of how the page is rendered: a key added to the model and not documented fails here."""
    page = (REPO / "docs" / "configuration.md").read_text()
    documented = re.findall(r"^\| `([^`]+)` \|", page, re.M)
    flat = [k for k in _keys(LabConfig) if not any(k == f.split(".")[0] for f in _keys(LabConfig) if "." in f)]
    assert sorted(documented) == sorted(flat)
    assert "vllm.max_num_seqs" in documented and "tenancy.tenants[].group" in documented


def test_the_quoted_figures_are_the_examples():
    stale = [str(p.relative_to(REPO)) for p in PAGES if docgen.fill_figures(p.read_text(), p.name) != p.read_text()]
    assert stale == [], f"figures differ from the examples in {stale}: run `python -m tests.docgen`"


def test_a_figure_follows_its_source(tmp_path, monkeypatch):
    """The marker's value comes from the JSON it names: another value there gives another page."""
    text = "<!-- fig examples/g4/result.json world_size -->2<!-- /fig --> ranks"
    assert docgen.fill_figures(text, "t") == text
    assert docgen.resolve({"xs": [{"a": 1, "b": 2}, {"a": 3, "b": 4}]}, "xs[a=3].b") == 4
    assert format(0.6123, ".0%") == "61%"  # the spec as the g6 chapter uses it
    with pytest.raises(docgen.DocError, match="t:1: no key 'nope'"):
        docgen.fill_figures("<!-- fig examples/g4/result.json nope -->1<!-- /fig -->", "t")
    # A marker that does not parse would otherwise be left alone, its figure never checked.
    with pytest.raises(docgen.DocError, match="t:2: a figure marker that does not parse"):
        docgen.fill_figures("x\n<!-- fig examples/g4/result.json world_size -->2<!-- fig -->", "t")
    filter_with_space = "<!-- fig examples/g1/result.json stages[name=node Ready].after_s .0f -->0<!-- /fig -->"
    assert docgen.fill_figures(filter_with_space, "t") == filter_with_space.replace("->0<", "->101<")


def _commands() -> list[tuple[str, str]]:
    """(page, command) for every `python -m ...` and `make ...` line in the docs' bash blocks."""
    out = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text()):
            if not block.startswith("```bash"):
                continue
            for line in block.splitlines()[1:-1]:
                cmd = line.split("#")[0].strip().removeprefix(".venv/bin/")
                for part in cmd.split("&&"):
                    part = part.strip()
                    if part.startswith(("python -m ", "make ")):
                        out.append((str(page.relative_to(REPO)), part))
    return out


COMMANDS = _commands()


def _main(module: str):
    """The main(argv) that `python -m module` runs (a package's is in its __main__)."""
    package = importlib.util.find_spec(module).submodule_search_locations is not None
    return importlib.import_module(f"{module}.__main__" if package else module).main


def _run(module: str, argv: list[str]) -> int | str | None:
    """main(argv) as `python -m module` would exit: argparse's --help raises SystemExit(0)."""
    try:
        return _main(module)(argv)
    except SystemExit as e:
        return e.code


def _help(module: str, lab: str | None, capsys) -> str:
    assert _run(module, [lab, "--help"] if lab else ["--help"]) in (0, None)
    return capsys.readouterr().out


def test_every_command_the_docs_show_exists_and_takes_its_flags(capsys):
    assert len(COMMANDS) > 40, "the docs' commands were not found"
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    helps: dict[tuple[str, str | None], str] = {}
    problems = []
    for page, cmd in COMMANDS:
        words = shlex.split(cmd)
        if words[0] == "make":
            if words[1] not in targets:
                problems.append(f"{page}: `{cmd}`: no make target {words[1]}")
            continue
        module = words[2]
        if module.split(".")[0] not in PROJECT:
            continue  # another tool's command (pytest): its flags are its own
        if importlib.util.find_spec(module) is None:
            problems.append(f"{page}: `{cmd}`: no module {module}")
            continue
        try:
            _main(module)
        except AttributeError:
            continue  # a script without a main(): importable is what can be checked offline
        lab = words[3] if module == "benchmarks" and len(words) > 3 and not words[3].startswith("-") else None
        key = (module, lab)
        if key not in helps:
            helps[key] = _help(module, lab, capsys)
        problems += [f"{page}: `{cmd}`: {module} has no {flag}" for flag in words if flag.startswith("--")
                     and flag.split("=")[0] not in helps[key]]  # fmt: skip
    assert problems == []


@pytest.mark.parametrize("cmd", RUN)
def test_the_quick_offline_commands_of_the_docs_run(cmd, capsys):
    assert any(c == cmd for _, c in COMMANDS), f"`{cmd}` is no longer in the docs"
    words = shlex.split(cmd)
    assert _run(words[2], words[3:]) in (0, None)
    out = capsys.readouterr().out
    assert out.strip() or "--check" in words  # a check that finds nothing stale says nothing
    for (page, quoted_cmd), figures in QUOTED.items():
        if quoted_cmd == cmd:
            text = (REPO / page).read_text()
            assert [f for f in figures if f not in out or f not in text] == [], f"{page} quotes `{cmd}`"


# --- a CommonMark render of every page ----------------------------------------------------------------

FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside a fenced block, by the fences a reader sees: each line
    that starts with ``` (or ~~~) opens or closes one, whatever follows it."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines()):
        if FENCE_LINE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((number, line))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_commonmark_renderer_sees_the_page_as_written(page):
    """No fence left open (one swallows the rest of the page in a renderer), and every heading a heading."""
    text = page.read_text()
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    last = len(text.splitlines())
    for token in tokens:
        if token.type == "fence":
            closing = text.splitlines()[token.map[1] - 1] if token.map[1] <= last else ""
            assert token.map[1] - token.map[0] >= 2 and FENCE_LINE.match(closing), (
                f"{page.name}:{token.map[0] + 1}: this fence is never closed: it runs to line {token.map[1]}")
    rendered = {token.map[0] for token in tokens if token.type == "heading_open"}
    written = {n for n, line in _outside_fences(text) if re.match(r"^#{1,6} \S", line)}
    assert sorted(written - rendered) == [], f"{page.name}: lines (0-based) written as headings, not rendered so"


def test_the_render_check_catches_a_fence_that_swallows_the_page():
    broken = "# t\n\n```bash\npython -m ops.estimate g6\n``` Every price\n\n## Cost\n\ntext\n"
    tokens = MarkdownIt("commonmark").parse(broken)
    assert "heading_open" not in [t.type for t in tokens[1:]], "the renderer swallows the heading"
    assert {n for n, line in _outside_fences(broken) if line.startswith("## ")} == {6}


# --- cost figures: every one quoted from `python -m ops.estimate --all --json` ------------------------

COST_SECTIONS = {
    **{f"docs/labs/{lab}.md": ["## What it costs"] for lab in LABS},
    "README.md": ["> **Cost warning.**", "From `make up LAB=g6` on"],
    "docs/operations.md": ["## Cost per lab", "From `pulumi up` on (about 10 minutes", "None of these replaces"],
}
DOLLARS = re.compile(r"\$(?=\d)")


def _cost_text(page: str, opener: str) -> str:
    """From `opener` to the next section (an opener that is a heading) or the end of its paragraph."""
    text = (REPO / page).read_text()
    start = text.index(opener)
    end = text.find("\n## ", start + 3) if opener.startswith("## ") else text.find("\n\n", start)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.parametrize("page,opener", [(p, o) for p, openers in COST_SECTIONS.items() for o in openers])
def test_cost_figures_are_the_estimates_own(page, opener):
    """Each figure of what a lab costs, from `make up` on and per benchmark run, is a marker over the
    estimate's JSON (refreshed by `make docs`, stale ones fail test_the_quoted_figures_are_the_examples),
    so the docs cannot tell a cost the estimate does not compute."""
    text = _cost_text(page, opener)
    assert "fig ops.estimate" in text
    loose = [text[max(m.start() - 30, 0) : m.start() + 10] for m in DOLLARS.finditer(text)]
    assert loose == [], f"{page}: dollar figures not quoted from ops.estimate: {loose}"
    for marker in docgen.FIGURE.finditer(text):
        assert marker["file"] == docgen.ESTIMATE, f"{page}: a cost figure from {marker['file']}"


def test_the_readmes_gpu_minutes_per_run_are_the_estimates_own():
    """The labs table's last column, lab by lab: a marker over that lab's run_gpu_minutes, or g6's
    "held from make up on", which the estimate says with a null run."""
    rows = re.findall(r"^\| \[(\w+)\]\(docs/labs/\1\.md\) \|.*\| ([^|]*) \|$", (REPO / "README.md").read_text(), re.M)
    assert sorted(lab for lab, _ in rows) == sorted(LABS)
    estimate = {s["stack"]: s for s in docgen._json(docgen.ESTIMATE)["stacks"]}
    for lab, cell in rows:
        if estimate[lab]["run_gpu_minutes"] is None:
            assert "from `make up` on" in cell, lab
        else:
            assert cell.startswith(f"<!-- fig ops.estimate stacks[stack={lab}].run_gpu_minutes d -->"), (lab, cell)


def test_g6_is_priced_with_its_gpu_node_from_make_up_on():
    """g6's vLLM Deployment asks for the L4 as `pulumi up` creates it: what the stack really does, read from
    the plan, sets the basis the docs quote (the figure itself is the estimate's, checked above)."""
    from stacks.mockrun import run_stack

    (deployment,) = [r for r in run_stack("g6").resources if r.type == "kubernetes:apps/v1:Deployment"
                     and "vllm" in r.name]  # fmt: skip
    assert deployment.inputs["spec"]["replicas"] == 1
    containers = deployment.inputs["spec"]["template"]["spec"]["containers"]
    assert any(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu") for c in containers)
    estimate = next(s for s in docgen._json(docgen.ESTIMATE)["stacks"] if s["stack"] == "g6")
    assert estimate["per_hour_from_up"] == estimate["per_hour_gpu_up"] > estimate["per_hour_gpu_at_zero"]
