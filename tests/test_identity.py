"""Honest fingerprints: a callable enters a key by what it computes, never by its name alone.

A module-level function is identified by its qualified name and source; anything else
by a declared identity (``cache_identity``, ``__vertebrae_identity__()``), else it is an
unsafe identity: keyed by a token unique to its object within the run (never shared
with another extractor) and never reused across runs.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.preprocessing import FunctionTransformer
from sklearn.random_projection import GaussianRandomProjection

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, CacheConfig, CallableExtractor, CallableMetric,
                           DatasetIdentity, SeparatixConfig, SklearnExtractor)
from vertebrae._base.fingerprint import UNIDENTIFIED, canonical, content_sha256, identified

IDENTITY = DatasetIdentity.declared("identity", "1")
QUIET = dict(separatix_config=SeparatixConfig(enabled=False))


def dataset() -> BenchmarkDataset:
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)


def run(extractors, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Benchmark(dataset(), extractors, **QUIET, **options).run()


# ----------------------------------------------------------------------------- the reproductions
def test_two_lambdas_in_estimators_never_share_a_job():
    """Both FunctionTransformers used to canonicalize to {"callable": "<lambda>"}: one job, one score for both."""
    noise = np.random.default_rng(1).normal(size=(60, 6)) * 50
    doubled = SklearnExtractor("doubled", FunctionTransformer(lambda Z: Z * 2))
    noisy = SklearnExtractor("noisy", FunctionTransformer(lambda Z: noise))
    plan = Benchmark(dataset(), [doubled, noisy], **QUIET).plan()
    assert plan.chain_keys[0]["extract"] != plan.chain_keys[1]["extract"]
    result = run([doubled, noisy])
    assert result["doubled"].primary_score != result["noisy"].primary_score
    alone = run([SklearnExtractor("doubled", FunctionTransformer(lambda Z: Z * 2))])
    assert result["doubled"].primary_score == alone["doubled"].primary_score
    for name in ("doubled", "noisy"):
        assert result[name].embedding["cache_eligible"] is False
        assert result[name].embedding["cache_status"] == "bypassed_unsafe_identity"


MODULE = "vertebrae_identity_features"


def write_module(tmp_path, body: str):
    (tmp_path / f"{MODULE}.py").write_text(f"def features(Z):\n    return {body}\n")
    sys.modules.pop(MODULE, None)
    importlib.invalidate_caches()
    return importlib.import_module(MODULE)


def test_editing_a_module_level_function_changes_its_key_and_the_cache_recomputes(tmp_path, monkeypatch):
    """The function keeps its name across the edit; its source (hence the key) changes, so no stale embeddings."""
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    (tmp_path / "code").mkdir()
    cache = CacheConfig(store=str(tmp_path / "cache"))

    def extractor(module):
        return SklearnExtractor("features", FunctionTransformer(module.features))

    first = write_module(tmp_path / "code", "Z * 2.0")
    before = run([extractor(first)], cache_config=cache)
    again = run([extractor(write_module(tmp_path / "code", "Z * 2.0"))], cache_config=cache)
    edited = run([extractor(write_module(tmp_path / "code", "Z[:, :2] * 2.0"))], cache_config=cache)
    assert before["features"].embedding["cache_status"] == "miss"
    assert again["features"].embedding["cache_status"] == "hit"  # unchanged source: a trusted identity
    assert edited["features"].embedding["cache_status"] == "miss"
    assert edited["features"].embedding["embedding_dim"] == 2 and before["features"].embedding["embedding_dim"] == 6
    sys.modules.pop(MODULE, None)


GLOBALS_MODULE = "vertebrae_identity_globals"
GLOBALS_SOURCE = """
import numpy as np

W = np.eye(6)
RNG = np.random.default_rng(0)


def project(X):
    return X @ W


def through_helper(X):
    return helper(X) + 0.0


def helper(X):
    return X @ W


def with_default(X, M=W):
    return X @ M


def noisy(X):
    return X + RNG.normal(size=X.shape)
"""


def test_a_rebound_module_global_is_a_miss_never_a_stale_hit(tmp_path, monkeypatch):
    """``W = np.eye(6); def f(X): return X @ W``: rebinding ``W`` used to be a hit with the old embedding."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{GLOBALS_MODULE}.py").write_text(GLOBALS_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    sys.modules.pop(GLOBALS_MODULE, None)
    importlib.invalidate_caches()
    module = importlib.import_module(GLOBALS_MODULE)
    cache = CacheConfig(store=str(tmp_path / "cache"))

    def statuses():
        result = run([CallableExtractor(name, getattr(module, name)) for name in ("project", "through_helper",
                                                                                  "with_default")],
                     cache_config=cache)
        return ({r.name: r.embedding["cache_status"] for r in result.extractor_results},
                {r.name: r.embedding["embedding_dim"] for r in result.extractor_results})

    everything = {"project": "miss", "through_helper": "miss", "with_default": "miss"}
    assert statuses() == (everything, {"project": 6, "through_helper": 6, "with_default": 6})
    assert statuses()[0] == {name: "hit" for name in everything}
    module.W = np.eye(6)[:, :2]  # rebound: what project and helper (through through_helper) compute changes
    assert statuses() == ({"project": "miss", "through_helper": "miss", "with_default": "hit"},
                          {"project": 2, "through_helper": 2, "with_default": 6})
    module.with_default.__defaults__ = (np.eye(6)[:, :3],)  # a default value is read too
    assert statuses() == ({"project": "hit", "through_helper": "hit", "with_default": "miss"},
                          {"project": 2, "through_helper": 2, "with_default": 3})
    module.W = np.eye(6)  # content, not object identity: the first entries are found again
    assert statuses()[0] == {"project": "hit", "through_helper": "hit", "with_default": "hit"}
    # a global that cannot be hashed (a random generator's state) makes the function an unsafe identity ...
    assert not identified(canonical(module.noisy))
    unsafe = run([CallableExtractor("noisy", module.noisy)], cache_config=cache)
    assert unsafe["noisy"].embedding["cache_status"] == "bypassed_unsafe_identity"
    # ... unless its cache_identity vouches for it
    declared = [CallableExtractor("noisy", module.noisy, cache_identity="noisy-seed0-v1")]
    assert run(declared, cache_config=cache)["noisy"].embedding["cache_status"] == "miss"
    assert run(declared, cache_config=cache)["noisy"].embedding["cache_status"] == "hit"
    assert canonical(module.project)["globals"]["W"] == {"content": content_sha256(module.W)}
    assert canonical(module.through_helper)["globals"]["helper"]["globals"]["W"] == {"content": content_sha256(module.W)}
    sys.modules.pop(GLOBALS_MODULE, None)


# ----------------------------------------------------------------------------- the rules
def module_function(Z):
    return Z + 1.0


class Declared:
    """A callable object that declares what it computes."""

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, Z):
        return Z * self.scale

    def __vertebrae_identity__(self):
        return {"scale": self.scale}


def test_canonical_identifies_functions_by_source_and_everything_else_by_declaration():
    assert canonical(module_function)["source_sha256"] and identified(canonical(module_function))
    assert identified(canonical(functools.partial(module_function)))
    assert canonical(Declared(2.0)) != canonical(Declared(3.0)) and identified(canonical(Declared(2.0)))
    scale = 2.0
    for unidentified in (lambda Z: Z, lambda Z: Z * scale, Declared(2.0).__call__.__func__.__get__(object()),
                         np.random.default_rng(0)):
        assert not identified(canonical(unidentified)), unidentified
    with_version = lambda Z: Z  # noqa: E731
    with_version.cache_identity = "doubling-v1"
    assert canonical(with_version)["cache_identity"] == "doubling-v1" and identified(canonical(with_version))
    assert not identified({"nested": [{UNIDENTIFIED: "x"}]})


def pca_of(Z):
    """Reads the global PCA: a scikit-learn estimator class, whose get_params is unbound."""
    return PCA(2, random_state=0).fit_transform(Z)


def test_a_function_reading_an_estimator_class_runs_and_carries_the_library_version(monkeypatch):
    """A class has ``get_params`` too (unbound): a function that read an imported estimator class crashed every run
    with get_params' TypeError, cache or not.  And what another distribution supplies (a module, a class, a
    function) computes what that distribution's version computes: upgrading scikit-learn must change the key of a
    function that calls PCA.  The upgrade is simulated by the version lookup, the one thing a test cannot install."""
    import vertebrae._base.fingerprint as fingerprint

    result = run([CallableExtractor("pca_of", pca_of)])
    assert result["pca_of"].embedding["embedding_dim"] == 2
    document = canonical(pca_of)["globals"]["PCA"]
    assert document == {"type": "sklearn.decomposition._pca.PCA",
                        "distribution": f"scikit-learn=={fingerprint.package_version('scikit-learn')}"}
    assert "distribution" not in canonical(module_function)  # nothing read from another distribution
    before = canonical(pca_of)
    real = fingerprint.package_version
    monkeypatch.setattr(fingerprint, "package_version", lambda name: "99.0" if name == "scikit-learn" else real(name))
    assert canonical(pca_of) != before
    assert canonical(pca_of)["globals"]["PCA"]["distribution"] == "scikit-learn==99.0"


def test_an_unseeded_random_component_is_unsafe_anywhere_in_the_estimator():
    from sklearn.pipeline import make_pipeline

    assert identified(canonical(GaussianRandomProjection(3, random_state=0)))
    assert not identified(canonical(GaussianRandomProjection(3)))
    assert not identified(canonical(make_pipeline(PCA(2, random_state=0), GaussianRandomProjection(2))))
    a, b = (SklearnExtractor(n, GaussianRandomProjection(3)) for n in ("a", "b"))
    plan = Benchmark(dataset(), [a, b], **QUIET).plan()
    assert plan.chain_keys[0]["extract"] != plan.chain_keys[1]["extract"]  # never one job for two draws
    assert not any(job.cache_eligible for job in plan.jobs if job.stage == "extract")
    seeded = [SklearnExtractor(n, GaussianRandomProjection(3, random_state=0)) for n in ("a", "b")]
    plan = Benchmark(dataset(), seeded, **QUIET).plan()
    assert plan.chain_keys[0]["extract"] == plan.chain_keys[1]["extract"] and all(j.cache_eligible for j in plan.jobs)


def test_a_module_level_function_is_trusted_without_a_declared_identity():
    plan = Benchmark(dataset(), [CallableExtractor("f", module_function)], **QUIET).plan()
    assert all(job.cache_eligible for job in plan.jobs)
    lam = Benchmark(dataset(), [CallableExtractor("f", lambda Z: Z + 1.0)], **QUIET).plan()
    assert not any(job.cache_eligible for job in lam.jobs if job.stage == "extract")


def test_a_declared_identity_object_is_shared_and_trusted():
    a = SklearnExtractor("a", FunctionTransformer(Declared(2.0)))
    b = SklearnExtractor("b", FunctionTransformer(Declared(2.0)))
    c = SklearnExtractor("c", FunctionTransformer(Declared(3.0)))
    keys = [k["extract"] for k in Benchmark(dataset(), [a, b, c], **QUIET).plan().chain_keys]
    assert keys[0] == keys[1] != keys[2]


def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    return {"score": float(np.asarray(embeddings).std())}


def test_a_metric_function_is_keyed_by_its_code():
    def key(metric):
        plan = Benchmark(dataset(), [SklearnExtractor("p", PCA(2, random_state=0))], metrics=[metric], **QUIET).plan()
        return next(job for job in plan.jobs if job.stage == "metrics")

    module_level = key(CallableMetric("m", spread))
    assert module_level.cache_eligible
    nested = key(CallableMetric("m", lambda e, l, **kw: spread(e, l, **kw)))  # noqa: E741
    assert not nested.cache_eligible and nested.key != module_level.key
    declared = key(CallableMetric("m", lambda e, l, **kw: spread(e, l, **kw), cache_identity="m-v1"))  # noqa: E741
    assert declared.cache_eligible


@pytest.mark.parametrize("order", [0, 1])
def test_the_unsafe_token_is_per_object_and_deterministic(order):
    """Two plans of one benchmark give the same keys (byte-identical results); two objects never share a job."""
    fn = lambda Z: Z * 3.0  # noqa: E731
    same = CallableExtractor("x", fn)
    other = CallableExtractor("y", fn)
    extractors = [same, other] if order == 0 else [other, same]
    plans = [Benchmark(dataset(), extractors, **QUIET).plan() for _ in range(2)]
    assert plans[0].chain_keys == plans[1].chain_keys
    assert plans[0].chain_keys[0]["extract"] != plans[0].chain_keys[1]["extract"]
