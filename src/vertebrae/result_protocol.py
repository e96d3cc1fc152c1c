"""The one protocol every per-chain result follows, the one ranking rule, and the JSON reading helpers.

Labeled-data (``ExtractorResult``), retrieval (``RetrievalEntry``) and zero-shot
(``ZeroShotExtractorResult``) results derive from :class:`ChainResult`, so the same
names mean the same thing in every family, and :func:`rank_results` is the only place a
ranking and its ranks are decided (``ranked_results()``, DataFrames, reports and
``vertebrae compare`` all use it).  See docs/results.md ("One result protocol").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from .errors import SerializationError

#: Attributes every per-chain result has, under these names (checked by tests/test_result_family.py).
PROTOCOL_FIELDS = ("name", "primary_metric_name", "primary_score", "higher_is_better", "aggregate_valid", "error",
                   "artifact_keys", "runtime", "embedding", "compression")
#: Columns every family's DataFrame row has (runtime follows as ``runtime.<stage>``).
PROTOCOL_COLUMNS = ("rank", "extractor", "primary_metric", "primary_score", "aggregate_valid", "warnings",
                    "compression_variant", "compression_method", "compression_requested_dim",
                    "compression_output_dim", "compression_applied", "raw_bytes_per_row", "evaluated_bytes_per_row")


class ChainResult:
    """Base of every per-chain result: the shared field names and the one validity rule.

    Subclasses are dataclasses with the fields ``name``, ``primary_metric_name``,
    ``primary_score`` (None when there is none), ``error`` (stage, type, message of a
    failed chain, else None), ``artifact_keys`` (stage -> artifact key), ``runtime``
    (seconds per stage, stored in the result's ``timing`` section), ``embedding`` (the
    embedding metadata: flat for one embedding, per endpoint or branch otherwise) and
    ``compression`` (the evaluated compression variant, None without variants).
    """

    name: str
    primary_metric_name: str
    primary_score: float | None
    error: dict[str, Any] | None
    artifact_keys: dict[str, str]
    runtime: dict[str, Any]
    embedding: dict[str, Any]
    compression: dict[str, Any] | None

    @property
    def higher_is_better(self) -> bool:
        """The primary metric's direction (retrieval and zero-shot metrics are all higher-is-better)."""
        return True

    def _primary_aggregate_valid(self) -> bool:
        """Whether the primary metric itself declares its aggregate valid (labeled data: custom metrics may not)."""
        return True

    @property
    def aggregate_valid(self) -> bool:
        """The one validity rule: no error, a primary score, and a primary aggregate declared valid; only valid
        results are ranked."""
        return self.error is None and self.primary_score is not None and self._primary_aggregate_valid()


R = TypeVar("R", bound=ChainResult)


class Ranked(NamedTuple):
    """One ranked result and its rank (see :func:`rank_results`)."""

    rank: int
    result: Any


def rank_results(results: Iterable[R]) -> list[Ranked]:
    """Valid results best-first in their primary metric's direction, with their ranks.

    The one tie rule is competition ranking: results with exactly equal primary scores share
    the better (lower) rank and the next rank skips (1, 1, 3); within a tie the input order is
    kept (the sort is stable).  Invalid results are left out (never ranked with a fallback).
    """
    ordered = sorted((r for r in results if r.aggregate_valid),
                     key=lambda r: -r.primary_score if r.higher_is_better else r.primary_score)
    ranked: list[Ranked] = []
    for position, result in enumerate(ordered, start=1):
        tied = ranked and result.primary_score == ranked[-1].result.primary_score
        ranked.append(Ranked(ranked[-1].rank if tied else position, result))
    return ranked


# --------------------------------------------------------------------- reading JSON
@contextlib.contextmanager
def reading(path: str) -> Iterator[None]:
    """Turn a missing key or a wrongly typed value inside ``path`` into one SerializationError.

    Every result family loads its JSON through this, so malformed or foreign documents fail
    with the path inside the document instead of a bare ``KeyError``.
    """
    try:
        yield
    except SerializationError:
        raise
    except KeyError as exc:
        raise SerializationError(f"{path}: missing key {exc.args[0]!r}; the file is incomplete, edited by hand or "
                                 "not written by this version of vertebrae") from None
    except (TypeError, ValueError, AttributeError, IndexError) as exc:
        raise SerializationError(f"{path}: malformed value ({type(exc).__name__}: {exc})") from None


def check_header(data: Any, result_type: str, schema_versions: tuple[int, ...]) -> None:
    """The document is a JSON object of ``result_type`` in one of ``schema_versions``, else a SerializationError."""
    if not isinstance(data, Mapping):
        raise SerializationError(f"$: not a vertebrae {result_type} result: expected a JSON object, "
                                 f"got {type(data).__name__}")
    if data.get("result_type") != result_type or data.get("schema_version") not in schema_versions:
        raise SerializationError(f"$: not a vertebrae {result_type} result of schema {schema_versions[-1]} "
                                 f"(result_type={data.get('result_type')!r}, "
                                 f"schema_version={data.get('schema_version')!r})")
