"""Markdown section for a dataset's structure: how its rows were materialized (relational units,
segmentation tokens, multi-modal fields), from the serialized dataset summary."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .markdown_table import table


def structure_section(data: Mapping[str, Any]) -> str:
    """One row per structure field; nested values are shown as compact JSON (the JSON report keeps them whole)."""
    structure = data["dataset_summary"].get("structure")
    if not structure:
        return ""
    rows = [[name, json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value]
            for name, value in structure.items()]
    return "## Dataset structure\n\n" + table(["field", "value"], rows)
