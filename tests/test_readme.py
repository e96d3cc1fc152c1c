"""The README's Python blocks run as written (issue 11, item 11)."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_python_blocks_run_and_print_the_score_columns(tmp_path, monkeypatch, capsys):
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert blocks, "README.md has no ```python block"
    monkeypatch.chdir(tmp_path)  # the snippet writes report.json / report.md to the current folder
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md python block {i}", "exec"), namespace)
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:3] == ["rank", "extractor", "primary_score"] and "stability_interval_low" in header
    assert not any(column.startswith("runtime.") for column in header)
    result = namespace["result"]
    best = result.ranked_results()[0]
    assert f"{best.name} overlap {best.primary_score}" in out
    assert (tmp_path / "report.json").exists() and (tmp_path / "report.md").exists()
