"""The contract page and glossary stay in step with the code that cites them.

* every section number ("§N" or "§N.M") cited in mebench/, README.md, docs/ or configs/ has a heading in
  docs/contract.md (a cited §N.M needs its own heading; a parent heading does not count);
* every ``Tested by:`` reference in docs/contract.md names an existing test file and a function
  defined in it;
* docs/glossary.md defines Track A, Track B, SFP and AOP.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"
GLOSSARY = ROOT / "docs" / "glossary.md"

CITED = re.compile(r"§(\d+(?:\.\d+)?)")
REF = re.compile(r"([\w./-]+\.py)::(\w+)")


def _cited_files() -> list[Path]:
    files = sorted((ROOT / "mebench").rglob("*.py"))
    files += [ROOT / "README.md"]
    files += sorted(f for f in (ROOT / "docs").rglob("*.md") if f != CONTRACT)
    files += sorted((ROOT / "configs").rglob("*.yaml"))
    return [f for f in files if f.is_file()]


def _cited_sections() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    for f in _cited_files():
        for number in CITED.findall(f.read_text(encoding="utf-8")):
            number = number.rstrip(".")
            cited.setdefault(number, set()).add(str(f.relative_to(ROOT)))
    return cited


def _heading_sections() -> set[str]:
    sections = set()
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            # the exact numbers in the heading: "§8" is not "§8.1" and "§1.1" is not "§1"
            sections.update(re.findall(r"§(\d+(?:\.\d+)?)(?![.\d])", line))
    return sections


def test_cited_sections_are_found():
    # guard against a regex that silently finds nothing
    cited = _cited_sections()
    assert cited, "no § citations found in mebench/, README.md, docs/ or configs/"
    assert "8" in cited


def test_every_cited_section_has_a_heading():
    headings = _heading_sections()
    missing = {n: sorted(where) for n, where in _cited_sections().items() if n not in headings}
    assert not missing, f"sections cited but without a heading in docs/contract.md: {missing}"


def test_headings_match_numbers_exactly():
    # §1.1's heading satisfies §1.1 only, never §1 (and the other way round)
    headings = _heading_sections()
    assert "1.1" in headings and "1" in headings
    assert not {h for h in headings if h.endswith(".")}


def _tested_by_refs() -> list[tuple[int, str, str]]:
    refs = []
    for i, line in enumerate(CONTRACT.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("Tested by:"):
            refs += [(i, path, name) for path, name in REF.findall(line)]
    return refs


def test_every_section_lists_its_tests():
    lines = CONTRACT.read_text(encoding="utf-8").splitlines()
    headings = sum(1 for line in lines if line.startswith("## §"))
    tested_by = sum(1 for line in lines if line.startswith("Tested by:"))
    assert headings == tested_by


def test_tested_by_references_exist():
    refs = _tested_by_refs()
    assert refs
    defined: dict[str, set[str]] = {}
    bad = []
    for lineno, path, name in refs:
        f = ROOT / path
        if not f.is_file():
            bad.append(f"line {lineno}: {path} does not exist")
            continue
        if path not in defined:
            tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
            defined[path] = {n.name for n in ast.walk(tree)
                             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if name not in defined[path]:
            bad.append(f"line {lineno}: {path} defines no function {name}")
    assert not bad, "\n".join(bad)


def test_glossary_defines_the_tracks():
    text = GLOSSARY.read_text(encoding="utf-8")
    terms = [line for line in text.splitlines() if line.startswith("**")]
    for term in ("Track A", "Track B", "SFP", "AOP"):
        assert any(line.startswith(f"**{term}") or f"— {term}" in line.split(".**")[0]
                   for line in terms), f"glossary does not define {term}"


def _slow_functions(path: Path) -> set[str]:
    """Test functions of ``path`` that carry ``@pytest.mark.slow``, or all of them under a module
    ``pytestmark`` naming it (a function with only some slow parameters counts as fast)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                      and "slow" in ast.unparse(n.value) for n in tree.body)
    if module_slow:
        return {f.name for f in funcs}
    return {f.name for f in funcs if any(ast.unparse(d).endswith("mark.slow") for d in f.decorator_list)}


def test_every_section_keeps_a_test_in_the_fast_tier():
    # `pytest -m "not slow"` still proves every section: each "Tested by" line names a test not marked slow
    lines = CONTRACT.read_text(encoding="utf-8").splitlines()
    slow: dict[str, set[str]] = {}
    only_slow = []
    for i, line in enumerate(lines, 1):
        if not line.startswith("Tested by:"):
            continue
        refs = REF.findall(line)
        for path, _ in refs:
            if path not in slow and (ROOT / path).is_file():
                slow[path] = _slow_functions(ROOT / path)
        if refs and all(name in slow.get(path, set()) for path, name in refs):
            only_slow.append(f"line {i}: every test is marked slow")
    assert not only_slow, "\n".join(only_slow)
