"""A tiny document model rendered to both Markdown and HTML.

The leaderboard and the comparison pages are built once as a list of blocks and
rendered twice, so the Markdown and HTML versions can never disagree. No
template engine or ``tabulate`` dependency is needed. See docs/guide/reports.md.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Sequence

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td:nth-child(-n+5) { text-align: left; }
img { max-width: 100%; } .note { color: #555; font-size: 0.9em; }
"""


@dataclass(frozen=True)
class Block:
    """One heading, paragraph, image or table.

    ``kind`` is ``h1``–``h3``, ``p``, ``img`` (``text`` = alt, ``src`` = file),
    ``table`` (``headers`` + ``rows`` of already formatted cells), or ``details`` /
    ``end_details`` around blocks shown folded (``text`` = the line that unfolds them).
    """

    kind: str
    text: str = ""
    src: str = ""
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = field(default_factory=tuple)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Block:
    """A table block; cells must already be strings."""
    return Block("table", headers=tuple(headers), rows=tuple(tuple(r) for r in rows))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: Sequence[Block]) -> str:
    """GitHub-flavoured Markdown."""
    out: list[str] = []
    for b in blocks:
        if b.kind.startswith("h"):
            out.append("#" * int(b.kind[1]) + " " + b.text)
        elif b.kind == "p":
            out.append(b.text)
        elif b.kind == "img":
            out.append(f"![{b.text}]({b.src})")
        elif b.kind == "details":
            out.append(f"<details><summary>{html.escape(b.text)}</summary>")
        elif b.kind == "end_details":
            out.append("</details>")
        elif b.kind == "table":
            lines = ["| " + " | ".join(_md_cell(h) for h in b.headers) + " |",
                     "|" + "|".join("---" for _ in b.headers) + "|"]
            lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows]
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def render_html(blocks: Sequence[Block], title: str) -> str:
    """A standalone HTML page (inline CSS, images by relative path)."""
    body: list[str] = []
    for b in blocks:
        if b.kind.startswith("h"):
            body.append(f"<{b.kind}>{html.escape(b.text)}</{b.kind}>")
        elif b.kind == "p":
            body.append(f'<p class="note">{html.escape(b.text)}</p>')
        elif b.kind == "img":
            body.append(f'<img src="{html.escape(b.src)}" alt="{html.escape(b.text)}">')
        elif b.kind == "details":
            body.append(f"<details><summary>{html.escape(b.text)}</summary>")
        elif b.kind == "end_details":
            body.append("</details>")
        elif b.kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                           for r in b.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _tiny(x: float) -> bool:
    return x != 0 and abs(x) < 1e-3


def fmt_value(x: float, scientific: bool | None = None) -> str:
    """Four decimals; scientific for tiny non-zero values (small KL); '–' for NaN. The value is first
    rounded to 10 decimals, so float noise of another numpy or pandas build (a mean of 0.11165 computed
    as 0.111650000001 or 0.111649999999) prints the same digits everywhere."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    x = round(float(x), 10) if not _tiny(x) else float(x)
    if scientific if scientific is not None else _tiny(x):
        return f"{x:.2e}"
    return f"{x:.4f}"


def fmt_mean_std(mean: float, std: float) -> str:
    """``0.9123 ± 0.0040`` (both in the mean's notation); no ± when std is undefined."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    sci = _tiny(mean)
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return fmt_value(mean, sci)
    return f"{fmt_value(mean, sci)} ± {fmt_value(std, sci)}"


def budget_label(b: int) -> str:
    """1000 → '1k', 1000000 → '1M', 1500 → '1.5k'."""
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if b >= div:
            return f"{b / div:g}{suffix}"
    return str(b)


def fmt_signed(x: float) -> str:
    """:func:`fmt_value` with an explicit ``+`` on positive values (differences, gains)."""
    text = fmt_value(x)
    return "+" + text if text != "–" and x > 0 else text


def fmt_gain(mean: float, lo: float, hi: float, n: int, min_n: int = 2) -> str:
    """``+0.0812 [+0.0700, +0.0911]``; ``+0.0812 (n<2)`` when no interval can be given."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    if n < min_n:
        return f"{fmt_signed(mean)} (n<{min_n})"
    return f"{fmt_signed(mean)} [{fmt_signed(lo)}, {fmt_signed(hi)}]"
