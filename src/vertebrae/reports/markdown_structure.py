"""The report section for a dataset's structure: how its rows were materialized (relational units,
segmentation tokens, multi-modal fields), from the serialized dataset summary."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .document import Section, Table


def structure_rows(summary: Mapping[str, Any]) -> list[list[Any]]:
    """One ``[field, value]`` row per structure field; nested values as compact JSON (the JSON keeps them whole)."""
    return [[name, json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value]
            for name, value in (summary.get("structure") or {}).items()]


def structure_section(data: Mapping[str, Any]) -> Section | None:
    rows = structure_rows(data["dataset_summary"])
    return Section("Dataset structure", [Table(["field", "value"], rows)]) if rows else None
