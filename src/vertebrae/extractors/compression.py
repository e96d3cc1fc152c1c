"""Compression variants: the configs, the transforms, their footprints and the quality/size frontier.

A benchmark can evaluate each extractor's embedding as several *variants* — the raw
matrix (``method="none"``) and compressed ones (PCA, truncated SVD, random
projections, Matryoshka-style prefixes, float16/int8/binary quantization).  Each
variant is its own result, scored exactly like a raw embedding, so "can I keep 64 of my
768 dimensions, or store int8?" is answered on the user's own labels.

Fitted transforms (PCA, SVD, random projections, int8 scales) are fitted on the
embedding being evaluated (transductive: the same rows that are scored; every
variant of every extractor gets the same treatment, so the comparison is fair for
ranking).  Retrieval fits them on the gallery and applies them to the queries.
Sparse (CSR) input is never densified: ``none``, sparse random projection, prefixes and
quantization keep it CSR; PCA, SVD and Gaussian projection return a dense matrix of the
reduced width (docs/compression.md).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._base.config import Config, check_bool, check_choice, check_seed
from .._base.sparse import is_sparse
from ..errors import ConfigError, ExtractorError
from .._base.threads import DEFAULT_THREAD_LIMIT, limited_threads

METHODS = ("none", "pca", "truncated_svd", "gaussian_random_projection", "sparse_random_projection",
           "prefix_truncate", "quantize")
QUANTIZE_DTYPES = ("float16", "int8", "binary")
#: Methods that reduce the width and therefore need ``n_components``.
REDUCING = ("pca", "truncated_svd", "gaussian_random_projection", "sparse_random_projection", "prefix_truncate")
#: Short labels used in variant names (``raw+pca64``).
_LABELS = {"pca": "pca", "truncated_svd": "svd", "gaussian_random_projection": "grp",
           "sparse_random_projection": "srp", "prefix_truncate": "prefix"}
#: int8 codes span [-INT8_MAX, INT8_MAX] (symmetric, so zero stays zero and CSR stays CSR).
INT8_MAX = 127
#: Bytes of one stored int8 scale (one float32 per dimension).
SCALE_BYTES = 4


@dataclasses.dataclass(frozen=True)
class EmbeddingCompressionConfig(Config):
    """One compression variant.

    ``n_components``: an integer width for every reducing method, or (``pca`` only) a
    variance fraction in (0, 1).  ``whiten`` applies to ``pca``; ``dtype`` to
    ``quantize`` (``float16``, ``int8`` with one scale per dimension, ``binary`` sign).
    ``random_state`` seeds PCA/SVD solvers and random projections.  ``name`` overrides
    the variant label used in result names (default e.g. ``pca64``, ``int8``).
    """

    method: str = "none"
    n_components: int | float | None = None
    whiten: bool = False
    dtype: str | None = None
    random_state: int = 0
    name: str | None = None

    def _validate(self) -> None:
        owner = "EmbeddingCompressionConfig"
        check_choice(owner, "method", self.method, METHODS)
        n = self.n_components
        if self.method in REDUCING:
            fraction = (isinstance(n, numbers.Real) and not isinstance(n, (bool, numbers.Integral))
                        and self.method == "pca")
            if fraction:
                if not (math.isfinite(n) and 0.0 < n < 1.0):
                    raise ConfigError(f"{owner}.n_components as a variance fraction must be in (0, 1), got {n!r}; "
                                      "pass an integer for a fixed width")
                self._set("n_components", float(n))
            elif isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
                also = " or a variance fraction in (0, 1)" if self.method == "pca" else ""
                raise ConfigError(f"{owner}.n_components must be a positive integer{also} for method "
                                  f"{self.method!r}, got {n!r}")
            else:
                self._set("n_components", int(n))
        elif n is not None:
            raise ConfigError(f"{owner}.n_components does not apply to method {self.method!r}; remove it "
                              f"(it applies to {list(REDUCING)})")
        check_bool(owner, "whiten", self.whiten)
        if self.whiten and self.method != "pca":
            raise ConfigError(f"{owner}.whiten applies to method 'pca' only, not {self.method!r}")
        if self.method == "quantize":
            if self.dtype is None:
                raise ConfigError(f"{owner}.dtype is required for method 'quantize': one of {list(QUANTIZE_DTYPES)}")
            check_choice(owner, "dtype", self.dtype, QUANTIZE_DTYPES)
        elif self.dtype is not None:
            raise ConfigError(f"{owner}.dtype applies to method 'quantize' only, not {self.method!r}; remove it")
        check_seed(owner, "random_state", self.random_state, allow_none=False)
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()
                                      or any(c in self.name for c in "+:")):
            raise ConfigError(f"{owner}.name must be a non-empty string without '+' or ':' (they separate parts of "
                              f"result names), got {self.name!r}")

    @property
    def label(self) -> str:
        """The variant's part of a result name: ``pca64``, ``pca0.95-whiten``, ``int8``, ``none``."""
        if self.name is not None:
            return self.name
        if self.method == "none":
            return "none"
        if self.method == "quantize":
            return self.dtype
        n = self.n_components
        label = f"{_LABELS[self.method]}{n:g}" if isinstance(n, float) else f"{_LABELS[self.method]}{n}"
        return label + ("-whiten" if self.whiten else "")


def check_compression(owner: str, compression: Sequence[Any] | None) -> tuple[EmbeddingCompressionConfig, ...]:
    """The variants of a benchmark: a list of configs with unique labels (``None``/empty: raw only)."""
    if compression is None:
        return ()
    if isinstance(compression, EmbeddingCompressionConfig) or not isinstance(compression, Sequence):
        raise ConfigError(f"{owner}: compression must be a list of EmbeddingCompressionConfig, got "
                          f"{type(compression).__name__}; wrap a single config in a list")
    seen: dict[str, int] = {}
    for i, config in enumerate(compression):
        if not isinstance(config, EmbeddingCompressionConfig):
            raise ConfigError(f"{owner}: compression[{i}] must be an EmbeddingCompressionConfig, got "
                              f"{type(config).__name__}")
        if config.label in seen:
            raise ConfigError(f"{owner}: compression[{i}] and compression[{seen[config.label]}] both make variant "
                              f"{config.label!r}; drop the duplicate or give one a distinct name=")
        seen[config.label] = i
    return tuple(compression)


def variant_name(base: str, variant: EmbeddingCompressionConfig | None) -> str:
    """``base`` for the raw embedding, ``base+label`` for a compressed variant (``raw+pca64``, ``m:cls+int8``)."""
    return base if variant is None or variant.method == "none" else f"{base}+{variant.label}"


def compression_fingerprint(settings: Any, chain: Any) -> dict[str, Any] | None:
    """The compress stage's config: the chain's variant (None leaves the stage out: the raw embedding)."""
    variant = getattr(chain, "variant", None)
    return None if variant is None or variant.method == "none" else variant.fingerprint()


def declares_matryoshka(extractor: Any, output: str | None = None) -> bool:
    """True when the extractor, the named output's metadata, or the extractor a retrieval adapter wraps
    declares Matryoshka training (``matryoshka = True``)."""
    if output is not None and hasattr(extractor, "output_metadata"):
        if extractor.output_metadata().get(output, {}).get("matryoshka"):
            return True
    inner = getattr(extractor, "extractor", None)
    return bool(getattr(extractor, "matryoshka", False) or getattr(inner, "matryoshka", False))


# ----------------------------------------------------------------------------- footprints
def stored_bytes(matrix: Any) -> int:
    """Bytes a dense or CSR matrix occupies as stored (CSR: data + indices + indptr)."""
    if is_sparse(matrix):
        return int(matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes)
    return int(matrix.nbytes)


def footprint(raw: Any, evaluated_bytes: int) -> dict[str, Any]:
    """Raw and evaluated bytes, per row and in total, kept separate."""
    n = int(raw.shape[0])
    raw_bytes = stored_bytes(raw)
    return {"n_rows": n, "raw_bytes": raw_bytes, "raw_bytes_per_row": raw_bytes / n,
            "evaluated_bytes": int(evaluated_bytes), "evaluated_bytes_per_row": evaluated_bytes / n}


# ----------------------------------------------------------------------------- the transforms
#: What a variant's warning says after its label when it was not applied; the reason follows, up to ``"; "``.
NOT_APPLIED = " not applied: "


class Compressor:
    """Fits one variant on a matrix and applies it (to the same matrix, or to queries in retrieval).

    ``fit_transform`` is what a benchmark runs (for PCA it is sklearn's own
    ``fit_transform``, so scores equal a direct sklearn call exactly); ``fit`` +
    ``transform`` is the paired form retrieval uses.  The estimators run on one BLAS thread
    (vertebrae._base.threads): faster on small machines, and the numbers do not depend on the core count
    (docs/performance.md, "Thread limit").
    """

    def __init__(self, config: EmbeddingCompressionConfig, *, source: str = "", matryoshka: bool = False) -> None:
        self.config = config
        self.source = source
        self.matryoshka = bool(matryoshka)
        self.warnings: list[str] = []
        self.applied = False
        self.input_dim: int | None = None
        self.output_dim: int | None = None
        self._estimator: Any = None
        self._scales: np.ndarray | None = None

    # -- fitting ---------------------------------------------------------------
    def fit(self, X: Any) -> "Compressor":
        self._fit(X, transform=False)
        return self

    def fit_transform(self, X: Any) -> Any:
        return self._fit(X, transform=True)

    def _fit(self, X: Any, transform: bool) -> Any:
        config, (n_rows, width) = self.config, X.shape
        self.input_dim, self.output_dim = int(width), int(width)
        self.applied = config.method != "none"
        requested = config.n_components
        if config.method in REDUCING and isinstance(requested, int):
            limit = min(n_rows, width) if config.method in ("pca", "truncated_svd") else width
            arpack = config.method == "pca" and is_sparse(X)  # scikit-learn's PCA of CSR rows: fewer than min(n, d)
            limit -= arpack
            if requested >= width or requested > limit:
                why = (f"the embedding has only {width} dimensions" if requested >= width
                       else f"{config.method} can keep at most {limit} components of {n_rows} "
                            f"{'sparse ' if arpack else ''}rows")
                self._not_applied(f"requested {requested} dimensions but {why}")
        if config.method == "quantize" and config.dtype == "float16" and self.applied:
            peak = _largest_magnitude(X.data if is_sparse(X) else np.asarray(X))
            if peak > FLOAT16_MAX:
                self._not_applied(f"values reach {peak:.4g}, beyond float16's largest finite value {FLOAT16_MAX:g}, "
                                  "which would store them as infinity",
                                  "scale the embeddings first or quantize to int8 (scaled per column)")
        if config.method == "prefix_truncate" and self.applied and not self.matryoshka:
            self._warn(f"{config.label} keeps the leading dimensions, but the extractor does not "
                       "declare itself Matryoshka-trained (matryoshka = True); leading dimensions of other models "
                       "are not ordered by importance")
        if not self.applied:
            return X if transform else None
        if config.method in ("pca", "truncated_svd", "gaussian_random_projection", "sparse_random_projection"):
            self._estimator = self._make_estimator(X)
            with limited_threads(DEFAULT_THREAD_LIMIT):
                if transform:
                    out = self._estimator.fit_transform(X)
                else:
                    self._estimator.fit(X)
                    out = None
            self.output_dim = int(self._estimator.components_.shape[0])
            return out
        if config.method == "prefix_truncate":
            self.output_dim = int(requested)
        elif config.dtype == "int8":
            self._scales = _int8_scales(X)
        return self.transform(X) if transform else None

    def _make_estimator(self, X: Any) -> Any:
        config = self.config
        if config.method == "pca":
            from sklearn.decomposition import PCA

            # A variance fraction needs the full spectrum; on CSR the covariance solver gives it without densifying.
            solver = "covariance_eigh" if is_sparse(X) and isinstance(config.n_components, float) else "auto"
            return PCA(n_components=config.n_components, whiten=config.whiten, svd_solver=solver,
                       random_state=config.random_state)
        if config.method == "truncated_svd":
            from sklearn.decomposition import TruncatedSVD

            return TruncatedSVD(n_components=config.n_components, random_state=config.random_state)
        if config.method == "gaussian_random_projection":
            from sklearn.random_projection import GaussianRandomProjection

            return GaussianRandomProjection(n_components=config.n_components, random_state=config.random_state)
        from sklearn.random_projection import SparseRandomProjection

        return SparseRandomProjection(n_components=config.n_components, dense_output=False,
                                      random_state=config.random_state)

    def _warn(self, message: str) -> None:
        """Recorded without ``source`` (a compress artifact is shared by every chain with its embedding and
        variant; :func:`attributed` names the result); the front door warns it once, as a CompressionWarning."""
        self.warnings.append(message)

    def _not_applied(self, why: str, advice: str = "") -> None:
        """The variant scores the uncompressed embedding; its warning carries ``why`` (the one place the result
        records it, read back by :func:`not_applied_reason`)."""
        self._warn(f"{self.config.label}{NOT_APPLIED}{why}; {advice + '; ' if advice else ''}"
                   "the variant scores the uncompressed embedding")
        self.applied = False

    # -- applying --------------------------------------------------------------
    def transform(self, X: Any) -> Any:
        """The evaluated matrix: what scoring sees (quantized values are dequantized to float32)."""
        config = self.config
        if not self.applied:
            return X
        if self._estimator is not None:
            with limited_threads(DEFAULT_THREAD_LIMIT):
                return self._estimator.transform(X)
        if config.method == "prefix_truncate":
            return X[:, :self.output_dim] if is_sparse(X) else np.ascontiguousarray(X[:, :self.output_dim])
        return _map_values(X, self._quantizer())

    def _quantizer(self):
        if self.config.dtype == "float16":
            return _float16
        if self.config.dtype == "binary":
            return lambda values, columns: np.sign(values).astype(np.float32)
        scales = self._scales

        def int8(values: np.ndarray, columns: Any) -> np.ndarray:
            scale = scales if columns is None else scales[columns]
            codes = np.clip(np.rint(values / scale), -INT8_MAX, INT8_MAX).astype(np.int8)
            return (codes * scale).astype(np.float32)

        return int8

    # -- facts -----------------------------------------------------------------
    def evaluated_bytes(self, evaluated: Any) -> int:
        """Stored bytes of the evaluated variant: honest for quantized codes (not their float32 decode)."""
        config = self.config
        if not self.applied or config.method != "quantize":
            return stored_bytes(evaluated)
        n_rows, width = evaluated.shape
        if is_sparse(evaluated):
            index_bytes = evaluated.indices.nbytes + evaluated.indptr.nbytes
            values = evaluated.nnz
        else:
            index_bytes, values = 0, None
        if config.dtype == "float16":
            value_bytes = 2 * (values if values is not None else n_rows * width)
        elif config.dtype == "int8":
            value_bytes = (values if values is not None else n_rows * width) + SCALE_BYTES * width
        else:  # binary: one sign bit per value, packed per row (dense) or over the stored values (CSR)
            value_bytes = math.ceil(values / 8) if values is not None else n_rows * math.ceil(width / 8)
        return int(value_bytes + index_bytes)

    def metadata(self, raw: Any, evaluated: Any) -> dict[str, Any]:
        """Method, parameters, dimensions, ``applied``, explained variance (where defined), footprint, warnings."""
        config, estimator = self.config, self._estimator
        explained = None
        if estimator is not None and hasattr(estimator, "explained_variance_ratio_"):
            explained = float(np.sum(estimator.explained_variance_ratio_))
        requested = config.n_components if config.method in REDUCING else None
        return {"variant": config.label, "method": config.method, "parameters": config.to_dict(),
                "requested_dim": requested, "input_dim": self.input_dim, "output_dim": self.output_dim,
                "applied": self.applied, "explained_variance_ratio": explained,
                "stored_dtype": _stored_dtype(config, evaluated) if self.applied else str(evaluated.dtype),
                "footprint": footprint(raw, self.evaluated_bytes(evaluated)), "warnings": list(self.warnings)}


def not_applied_reason(compression: Mapping[str, Any] | None) -> str | None:
    """Why a variant scored the uncompressed embedding (``requested 64 dimensions but the embedding has only 12
    dimensions``), read back from its warning: results store the reason only there, so archived JSON has it too.
    None for an applied variant, the ``none`` variant or a result without variants."""
    if not compression or compression["applied"] or compression["method"] == "none":
        return None
    marker = compression["variant"] + NOT_APPLIED
    for warning in compression.get("warnings", []):
        _, found, rest = warning.partition(marker)
        if found:
            return rest.split("; ", 1)[0]
    return None


def not_applied_names(extractor_results: Sequence[Mapping[str, Any]]) -> list[str]:
    """``raw+pca64 (requested 64 dimensions but ...)`` for each result whose variant was not applied."""
    names = []
    for result in extractor_results:
        compression = result.get("compression")
        if compression and compression["method"] != "none" and not compression["applied"]:
            reason = not_applied_reason(compression)
            names.append(result["name"] + (f" ({reason})" if reason else ""))
    return names


def attributed(facts: dict[str, Any], source: str) -> dict[str, Any]:
    """Compression facts as a result shows them: each warning prefixed with ``source`` (the result's extractor)."""
    return {**facts, "warnings": [f"{source}: {w}" for w in facts["warnings"]]}


def raw_variant_metadata(raw: Any, config: EmbeddingCompressionConfig | None = None) -> dict[str, Any]:
    """The ``none`` variant: the raw embedding, evaluated as is (``applied`` is False, footprints equal)."""
    compressor = Compressor(config or EmbeddingCompressionConfig()).fit(raw)
    return compressor.metadata(raw, raw)


def _stored_dtype(config: EmbeddingCompressionConfig, evaluated: Any) -> str:
    if config.method != "quantize":
        return str(evaluated.dtype)
    return {"float16": "float16", "int8": "int8+float32 scales", "binary": "1-bit sign"}[config.dtype]


def _int8_scales(X: Any) -> np.ndarray:
    """One symmetric scale per dimension: max |x| / 127 (1 for an all-zero column, whose codes are 0)."""
    if is_sparse(X):
        peak = np.asarray(abs(X).max(axis=0).toarray()).ravel()
    else:
        peak = np.abs(X).max(axis=0)
    peak = peak.astype(np.float64)
    return np.where(peak > 0, peak / INT8_MAX, 1.0).astype(np.float32)


#: The largest finite float16; a value beyond it would be stored as infinity.
FLOAT16_MAX = float(np.finfo(np.float16).max)


def _largest_magnitude(values: np.ndarray) -> float:
    return float(np.abs(values).max()) if values.size else 0.0


def _float16(values: np.ndarray, columns: Any) -> np.ndarray:
    """float16 and back; a value beyond float16's range (rows transformed after the fit, e.g. retrieval's queries)
    is refused rather than turned into infinity."""
    peak = _largest_magnitude(values)
    if peak > FLOAT16_MAX:
        raise ExtractorError(f"float16 quantization: a value of magnitude {peak:.4g} is beyond float16's largest "
                             f"finite value {FLOAT16_MAX:g}; scale the embeddings first or quantize to int8")
    return values.astype(np.float16).astype(np.float32)


def _map_values(X: Any, fn: Any) -> Any:
    """Apply a value-wise quantizer; CSR keeps its structure (quantizers map 0 to 0)."""
    if is_sparse(X):
        out = X.copy()
        out.data = fn(X.data, X.indices)
        out.eliminate_zeros()
        return out
    return fn(np.asarray(X), None)


# ----------------------------------------------------------------------------- the frontier
def pareto_frontier(points: Sequence[tuple[float | None, float]], higher_is_better: bool = True) -> list[bool]:
    """Which (score, bytes per row) points no other point beats on both (better or equal, one strictly).

    Points without a score (invalid aggregates) are never on the frontier.
    """
    def better(a: float, b: float) -> bool:
        return a > b if higher_is_better else a < b

    marks = []
    for score, size in points:
        if score is None:
            marks.append(False)
            continue
        dominated = any(other is not None and not better(score, other) and other_size <= size
                        and (better(other, score) or other_size < size)
                        for other, other_size in points)
        marks.append(not dominated)
    return marks


def frontier_rows(extractor_results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per source embedding, each variant's primary score against its evaluated bytes per row, frontier marked.

    Reads serialized results (``BenchmarkResult.to_dict()["extractor_results"]``), so an
    archived JSON gives the same frontier.  Rows are grouped by source in result order.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for result in extractor_results:
        compression = result.get("compression")
        if compression and not result.get("error"):
            groups.setdefault(compression["source"], []).append(result)
    rows = []
    for source, results in groups.items():
        primary = results[0]["metrics"][results[0]["primary_metric_name"]]
        points = [(r["primary_score"], r["compression"]["footprint"]["evaluated_bytes_per_row"]) for r in results]
        marks = pareto_frontier(points, primary["higher_is_better"])
        for result, (score, size), on_frontier in zip(results, points, marks):
            compression = result["compression"]
            raw = compression["footprint"]["raw_bytes_per_row"]
            rows.append({"source": source, "result": result["name"], "variant": compression["variant"],
                         "method": compression["method"], "requested_dim": compression["requested_dim"],
                         "output_dim": compression["output_dim"], "applied": compression["applied"],
                         "stored_dtype": compression["stored_dtype"], "primary_metric": result["primary_metric_name"],
                         "primary_score": score, "raw_bytes_per_row": raw, "evaluated_bytes_per_row": size,
                         "size_ratio": size / raw if raw else None,
                         "explained_variance_ratio": compression["explained_variance_ratio"],
                         "frontier": on_frontier})
    return rows
