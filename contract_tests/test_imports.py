"""The package's import graph, counted honestly (issue 55): every ``import`` of a ``mebench`` module,
function-local ones included (only ``if TYPE_CHECKING:`` blocks, which never run, are left out).

- No module imports another module's private name (``from mebench.x import _y``).
- No import circle beyond the ones still being taken apart, listed here with what holds them; a
  new circle fails, and so does a listed one that grows. The list may only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mebench"

#: Circles still in the code: none. (The run wing's knot went when the probes stopped importing the
#: world, transferability's when the input gradient moved to fidelity, the victims' when the format
#: registry took over building and checking a victim and the formats module stopped reading it.)
KNOWN_CIRCLES: list[frozenset[str]] = []


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def graph() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """(module -> modules it imports, [(importer, module, private name)])."""
    mods = modules()

    def owner(name: str) -> str:
        while name and name not in mods:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        return name

    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for m, path in mods.items():
        package = m if path.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [(owner(a.name), None) for a in node.names if a.name.startswith("mebench")]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                if not base.startswith("mebench"):
                    continue
                targets = []
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append((sub if sub in mods else owner(base), None if sub in mods else a.name))
            else:
                continue
            for target, name in targets:
                if target and target != m:
                    edges[m].add(target)
                    if name and name.startswith("_") and not name.startswith("__"):
                        private.append((m, target, name))
    return edges, private


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))
    return out


def test_no_private_name_is_imported_across_modules():
    _, private = graph()
    assert private == [], "imports of another module's private name: " + "; ".join(
        f"{m} imports {t}.{n}" for m, t, n in private)


def test_no_new_import_circle():
    found = circles(graph()[0])
    new = [sorted(c) for c in found if not any(c <= known for known in KNOWN_CIRCLES)]
    assert new == [], f"import circles: {new}"


def test_the_walker_sees_function_local_imports_and_circles(tmp_path, monkeypatch):
    pkg = tmp_path / "mebench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from mebench.sub.b import g\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mebench.c import x\n"
                                      "def g():\n    from mebench import a\n    from mebench.c import _hidden\n")
    (pkg / "c.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    edges, private = graph()
    assert edges["mebench.a"] == {"mebench.sub.b"} and "mebench.a" in edges["mebench.sub.b"]
    assert circles(edges) == [frozenset({"mebench.a", "mebench.sub.b"})]
    assert private == [("mebench.sub.b", "mebench.c", "_hidden")]
