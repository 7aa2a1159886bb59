"""The package's layers (issue 35): the report reads only records and the config layer only
configs (neither imports torch) and no module
imports another that imports it back (0 import circles)."""

from __future__ import annotations

import ast
import re
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mebench"


def module_names(folder: Path, prefix: str) -> list[str]:
    """Dotted names of every module under ``folder`` (``prefix`` is the folder's package)."""
    names = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        names.append(".".join((prefix, *parts[:-1])) if parts[-1] == "__init__" else ".".join((prefix, *parts)))
    return names


def torch_modules_after_importing(names: list[str]) -> list[str]:
    """The torch modules a fresh interpreter holds after importing ``names`` (at most 5)."""
    code = ("import importlib, json, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))[:5]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


# issue 35: a report is read on machines without torch; importing any report module loads none.
@pytest.mark.slow  # a fresh interpreter
def test_no_report_module_imports_torch():
    names = module_names(PACKAGE / "report", "mebench.report")
    assert len(names) > 5 and torch_modules_after_importing(names) == []


# issue 35: the config layer (builder, schema, validation) and the run's plan answer a config
# mistake before any heavy import, so none of them loads torch.
@pytest.mark.slow  # a fresh interpreter
def test_no_config_module_imports_torch():
    names = module_names(PACKAGE / "config", "mebench.config")
    assert {"mebench.config.validation", "mebench.config.builder"} <= set(names)
    assert torch_modules_after_importing([*names, "mebench.run.plan"]) == []


def imports_of(path: Path, name: str) -> set[str]:
    """The ``mebench`` modules ``path`` imports at module level (function-level imports are deferred on purpose)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in tree.body:  # module level only, including ``if TYPE_CHECKING`` blocks' absence
        nodes = [node]
        if isinstance(node, ast.Try):
            nodes = node.body
        for n in nodes:
            if isinstance(n, ast.Import):
                found |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - n.level + 1] + ([base] if base else []))
                found.add(base)
                found |= {f"{base}.{a.name}" for a in n.names}
    return {f for f in found if f == "mebench" or f.startswith("mebench.")}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at load time (names that are not modules are dropped)."""
    names = module_names(PACKAGE, "mebench")
    files = {n: PACKAGE.joinpath(*n.split(".")[1:]) for n in names}
    graph = {}
    for name in names:
        path = files[name].with_suffix(".py") if files[name].with_suffix(".py").is_file() else files[name] / "__init__.py"
        graph[name] = {m for m in imports_of(path, name) if m in files and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# issue 35: 0 import circles among mebench's modules (module-level imports; a package's
# ``__init__`` importing its own submodules is how registries fill, not a circle, and is skipped).
def test_no_import_circles_among_mebench_modules():
    graph = import_graph()
    for name, deps in graph.items():  # a package importing its submodules, or a submodule its package
        graph[name] = {d for d in deps if not d.startswith(name + ".") and not name.startswith(d + ".")}
    assert len(graph) > 50
    assert cycles(graph) == []


# issue 35: the engine is the query loop and its probe events; what a run writes, builds or
# measures lives in the modules around it (world, seed_records, probes), so it stays short.
def test_the_engine_stays_the_loop_and_its_events():
    lines = (PACKAGE / "run" / "engine.py").read_text().splitlines()
    assert len(lines) <= 250, f"mebench/run/engine.py has {len(lines)} lines (at most 250)"


def architecture_map() -> dict[str, str]:
    """The package map of docs/architecture.md: each top-level entry (``run/``, ``oracle.py``) -> its text."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    block = page.split("```\nmebench/\n", 1)[1].split("```", 1)[0]
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        head = line[2:].split(" ", 1)[0] if line.startswith("  ") and not line.startswith("   ") else ""
        if head:
            current = head
            entries[current] = line[2 + len(head):]
        elif current:
            entries[current] += " " + line.strip()
    return entries


# issue 55: the root holds at most 12 modules and the architecture page names every module where it lives
# (a module added without its line on the map fails here).
def test_the_root_is_small_and_the_map_names_every_module():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 12, f"{len(root)} modules at mebench/'s root (at most 12): {root}"
    entries = architecture_map()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py":
            continue
        top, _, rest = rel.partition("/")
        if not rest:  # a root module: its own entry, or named in another root entry's text
            if top not in entries and not any(top in text.split() or f"{top}:" in text for text in entries.values()):
                missing.append(rel)
        else:  # in its folder's entry; a subfolder's module after the subfolder's name ("sub/ (a.py ...")
            text = entries.get(f"{top}/", "")
            sub, _, name = rest.rpartition("/")
            text = text[text.find(f"{sub}/"):] if sub and f"{sub}/" in text else ("" if sub else text)
            if not re.search(rf"(?<![\w/]){re.escape(name)}\b", text):
                missing.append(rel)
    assert not missing, f"docs/architecture.md does not name: {missing}"


#: the doors where a config becomes plans: resolve and its helpers, the site, and engine.run (validate,
#: resolve, run the plans); nothing else under the run wing or the probes reads a RunConfig
CONFIG_DOORS = {"mebench.run.plan": {"resolve", "site", "_probes", "_victim_plan"}, "mebench.run.engine": {"run"}}


# issue 55: the plan is the run's only input: no function of the run wing or of a probe takes or reads a
# RunConfig (an argument named cfg, a RunConfig annotation, an attribute .cfg) beyond the doors above.
def test_nothing_below_the_plan_reads_a_run_config():
    found = []
    for folder in ("run", "probes"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            module = "mebench." + path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
            tree = ast.parse(path.read_text())
            for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                if fn.name in CONFIG_DOORS.get(module, ()):
                    continue
                args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
                reads = [a.arg for a in args if a.arg == "cfg" or "RunConfig" in ast.unparse(a.annotation or ast.Constant(""))]
                reads += [f".{n.attr}" for n in ast.walk(fn) if isinstance(n, ast.Attribute) and n.attr == "cfg"]
                reads += [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == "RunConfig"]
                if reads:
                    found.append(f"{module}.{fn.name}: {sorted(set(reads))}")
    assert not found, found


MAX_DOCSTRING_LINES = 10

#: Modules whose docstrings break the rule below while their owners shorten them (issue 55, item 6).
#: The set may only shrink: the test fails on an entry that is gone or already keeps the rule.
LONG_DOCSTRINGS_PENDING: set[str] = set()


def docstring_problem(source: str) -> str | None:
    """Why a module's docstring breaks the rule (at most 10 lines; over 3 lines, it names a
    ``docs/`` page that exists), or None when it keeps it."""
    doc = ast.get_docstring(ast.parse(source), clean=False)
    if doc is None:
        return None
    lines = len(doc.splitlines())
    if lines > MAX_DOCSTRING_LINES:
        return f"{lines} lines (at most {MAX_DOCSTRING_LINES})"
    if lines > 3 and "docs/" not in doc:
        return f"{lines} lines and no docs/ page named"
    missing = [p for p in re.findall(r"docs/[\w./-]*\.md", doc) if not (PACKAGE.parent / p).is_file()]
    return f"names pages that do not exist: {missing}" if missing else None


def test_the_docstring_rule_flags_long_and_unlinked_docstrings():
    assert docstring_problem('"""One line."""\nx = 1\n') is None
    assert docstring_problem('"""A.\n\nB\nC\nD. See docs/architecture.md.\n"""\n') is None
    assert docstring_problem('"""A.\n\nB\nC\nD.\n"""\n') == "5 lines and no docs/ page named"
    assert docstring_problem('"""' + "line\n" * 11 + 'See docs/architecture.md."""\n') == "12 lines (at most 10)"
    assert docstring_problem('"""A. See docs/no_such_page.md."""\n') == "names pages that do not exist: ['docs/no_such_page.md']"


# issue 55, item 6: a module docstring says what the module is for in at most 10 lines and, when
# longer than 3, names the docs page where the detail lives (STYLE.md: the long story lives once,
# on its page); the modules still pending are listed, and the list can only shrink.
def test_module_docstrings_are_short_and_link_their_page():
    problems = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        why = docstring_problem(path.read_text())
        if why:
            problems[path.relative_to(PACKAGE.parent).as_posix()] = why
    stale = sorted(LONG_DOCSTRINGS_PENDING - set(problems))
    assert not stale, f"remove from LONG_DOCSTRINGS_PENDING (gone, or the docstring keeps the rule now): {stale}"
    new = {name: why for name, why in problems.items() if name not in LONG_DOCSTRINGS_PENDING}
    assert not new, f"module docstrings to shorten (at most 10 lines, naming their docs/ page): {new}"
