"""The report's files: a table as CSV (and JSON with its definitions), a page as Markdown (and HTML).

Shared by the report writer and the detection benchmark's report (``mebench.report.detection_bench``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from mebench.report.document import render_html, render_markdown
from mebench.support.serial import jsonable


def frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    plain = frame.astype(object).where(frame.notna(), None)
    return jsonable(plain.to_dict(orient="records"))


def write_table(frame: pd.DataFrame, out: Path, name: str, files: dict[str, Path],
                 definitions: Any = None) -> None:
    """CSV always; JSON ``{"definitions": ..., "rows": [...]}`` when definitions are given."""
    files[f"{name}_csv"] = out / f"{name}.csv"
    frame.to_csv(files[f"{name}_csv"], index=False)
    if definitions is not None:
        doc = {"definitions": definitions, "rows": frame_records(frame)}
        files[f"{name}_json"] = out / f"{name}.json"
        files[f"{name}_json"].write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n",
                                         encoding="utf-8")


def write_pages(blocks: list, out: Path, name: str, title: str, files: dict[str, Path],
                 html: bool = True) -> None:
    files[f"{name}_md"] = out / f"{name}.md"
    files[f"{name}_md"].write_text(render_markdown(blocks), encoding="utf-8")
    if html:
        files[f"{name}_html"] = out / f"{name}.html"
        files[f"{name}_html"].write_text(render_html(blocks, title), encoding="utf-8")
