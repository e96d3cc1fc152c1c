"""Content-aware keys: each stage's key changes with what it reads, and only with that.

Every test builds plans (cheap: no extractor runs) and compares each chain's
stage -> key map between a base benchmark and one changed input.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import PCA
from sklearn.preprocessing import FunctionTransformer

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, CallableMetric, DatasetIdentity,
                           OverlapScoringConfig, PrecomputedExtractor, SeparatixConfig, SklearnExtractor,
                           StabilityConfig)
from vertebrae.execution import plan as plan_module
from vertebrae.execution import registry
from vertebrae.families.retrieval import RetrievalBenchmark, RetrievalConfig, RetrievalDataset

IDENTITY = DatasetIdentity.declared("keys", "1")
STAGES = ("extract", "embedding", "score", "stability", "metrics", "diagnose", "assemble")


def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None, scale=1.0):
    return {"score": scale * float(np.asarray(embeddings.std()))}


def data(y_shift: int = 0, X=None, groups=None):
    X0, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    X = X0 if X is None else X
    y = (y + y_shift) % 3
    groups = np.arange(len(y)) % 10 if groups is None else groups
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY, groups=groups)


def keys(dataset=None, extractors=None, **settings) -> dict[str, str]:
    """stage -> key of the first chain of a fully configured benchmark."""
    options = dict(stability_config=StabilityConfig(repeats=3), separatix_config=SeparatixConfig(),
                   metrics=[CallableMetric("spread", spread, params={"scale": 1.0}, cache_identity="spread-v1")])
    options.update(settings)
    extractors = extractors or [SklearnExtractor("pca", PCA(2, random_state=0))]
    plan = Benchmark(dataset or data(), extractors, **options).plan()
    return plan.chain_keys[0]


def changed(a: dict[str, str], b: dict[str, str]) -> set[str]:
    assert a.keys() == b.keys() == set(STAGES)
    return {stage for stage in a if a[stage] != b[stage]}


@pytest.fixture(scope="module")
def base() -> dict[str, str]:
    return keys()


# ----------------------------------------------------------------------------- per input
def test_renaming_the_extractor_changes_only_the_assembled_result(base):
    assert changed(base, keys(extractors=[SklearnExtractor("renamed", PCA(2, random_state=0))])) == {"assemble"}


def test_new_labels_keep_the_embedding_and_change_everything_scored(base):
    assert changed(base, keys(dataset=data(y_shift=1))) == {"score", "stability", "metrics", "diagnose", "assemble"}


def test_a_supervised_extractor_is_keyed_on_the_labels_too():
    def supervised(dataset):
        return keys(dataset=dataset, extractors=[SklearnExtractor("pca", PCA(2, random_state=0), supervised=True)])

    assert "extract" in changed(supervised(data()), supervised(data(y_shift=1)))


def test_new_input_content_changes_every_key(base):
    X, _ = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    X = X.copy()
    X[7, 3] += 1e-3
    assert changed(base, keys(dataset=data(X=X))) == set(STAGES)


def test_new_groups_change_only_the_group_aware_stages(base):
    assert changed(base, keys(dataset=data(groups=np.arange(60) % 7))) == {"metrics", "diagnose", "assemble"}


@pytest.mark.parametrize("setting, expected", [
    ({"separatix_config": SeparatixConfig(overlap_threshold=0.5)}, {"diagnose", "assemble"}),
    ({"stability_config": StabilityConfig(repeats=4)}, {"stability", "assemble"}),
    ({"metrics": [CallableMetric("spread", spread, params={"scale": 2.0}, cache_identity="spread-v1")]},
     {"metrics", "assemble"}),
    # metrics read only the score's seed, so a k change leaves their key alone
    ({"scoring_config": OverlapScoringConfig(k=4)}, {"score", "stability", "diagnose", "assemble"}),
    ({"scoring_config": OverlapScoringConfig(random_state=7)}, {"score", "stability", "metrics", "diagnose", "assemble"}),
    ({"primary_metric": "spread"}, {"assemble"}),
    ({"quality_tolerance": 0.1}, {"assemble"}),
])
def test_each_config_changes_its_stage_and_what_reads_it(base, setting, expected):
    assert changed(base, keys(**setting)) == expected


def test_stability_n_jobs_changes_no_key(base):
    assert changed(base, keys(stability_config=StabilityConfig(repeats=3, n_jobs=2))) == set()


def test_a_new_package_version_changes_the_stages_it_computes(base, monkeypatch):
    real = plan_module.version_of
    monkeypatch.setattr(plan_module, "version_of", lambda name: "99.0" if name == "separatix" else real(name))
    assert changed(base, keys()) == {"diagnose", "assemble"}
    monkeypatch.setattr(plan_module, "version_of", lambda name: "99.0" if name == "overlapindex" else real(name))
    assert changed(base, keys()) == {"score", "stability", "diagnose", "assemble"}


def test_a_new_stage_code_version_changes_it_and_downstream(base, monkeypatch):
    stages = registry._REGISTRY["benchmark"]
    monkeypatch.setitem(stages, "score", dataclasses.replace(stages["score"], version=stages["score"].version + 1))
    assert changed(base, keys()) == {"score", "diagnose", "assemble"}


def test_scikit_learn_parameters_are_hashed_by_content_not_repr():
    a = np.zeros(5000)
    b = a.copy()
    b[2500] = 1.0
    assert repr(a) == repr(b)  # why repr-based hashing was wrong

    def extract_key(vector):
        extractor = SklearnExtractor("f", FunctionTransformer(np.add, kw_args={"x2": vector[:6]}))
        return keys(extractors=[extractor])["extract"]

    c = np.zeros(6)
    d = c.copy()
    d[3] = 1e-12
    assert extract_key(c) != extract_key(d)
    assert keys(extractors=[SklearnExtractor("p", PCA(2, random_state=0))])["extract"] != \
        keys(extractors=[SklearnExtractor("p", PCA(2, random_state=1))])["extract"]


def test_sparse_inputs_hash_by_content_whatever_the_container():
    X, _ = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    X[X < 0.5] = 0
    as_matrix, as_array = sp.csr_matrix(X), sp.csr_array(X)
    assert keys(dataset=data(X=as_matrix))["extract"] == keys(dataset=data(X=as_array))["extract"]
    assert keys(dataset=data(X=as_matrix))["extract"] != keys(dataset=data(X=sp.csr_matrix(X.astype(np.float64))))[
        "extract"]


# ----------------------------------------------------------------------------- unsafe identities
def test_callables_without_a_declared_identity_never_share_a_key_and_are_marked():
    first = CallableExtractor("same", lambda X: X[:, :3])
    plan = Benchmark(data(), [first, CallableExtractor("other", lambda X: X[:, 3:])]).plan()
    extract_a, extract_b = (k["extract"] for k in plan.chain_keys)
    assert extract_a != extract_b
    assert not any(job.cache_eligible for job in plan.jobs if job.stage in ("extract", "score"))
    result = Benchmark(data(), [first], separatix_config=SeparatixConfig(enabled=False)).run()
    assert result["same"].embedding["cache_eligible"] is False
    assert result["same"].embedding["cache_status"] == "bypassed_unsafe_identity"


def test_a_declared_cache_identity_is_trusted_and_shared():
    fn = lambda X: X[:, :3]  # noqa: E731
    a = CallableExtractor("a", fn, cache_identity="first3-v1")
    b = CallableExtractor("b", fn, cache_identity="first3-v1")
    plan = Benchmark(data(), [a, b]).plan()
    assert plan.chain_keys[0]["extract"] == plan.chain_keys[1]["extract"]
    assert all(job.cache_eligible for job in plan.jobs)
    result = Benchmark(data(), [a], separatix_config=SeparatixConfig(enabled=False)).run()
    assert result["a"].embedding["cache_eligible"] is True and result["a"].embedding["cache_status"] == "disabled"


def test_a_callable_metric_without_identity_makes_only_its_stage_ineligible():
    def nested(embeddings, labels, **options):  # a nested function: its source does not say what it captures
        return spread(embeddings, labels, **options)

    plan = Benchmark(data(), [PrecomputedExtractor("e", gaussian_classes(20, 3, 6)[0])],
                     metrics=[CallableMetric("spread", nested)]).plan()
    eligible = {job.stage: job.cache_eligible for job in plan.jobs}
    assert eligible["metrics"] is False and eligible["assemble"] is False
    assert eligible["extract"] and eligible["score"] and eligible["diagnose"]


def test_an_ephemeral_dataset_is_never_eligible():
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    dataset = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.ephemeral())
    plan = Benchmark(dataset, [SklearnExtractor("pca", PCA(2, random_state=0))]).plan()
    assert not any(job.cache_eligible for job in plan.jobs)


# ----------------------------------------------------------------------------- jobs are self-describing
def test_jobs_and_the_run_context_pickle():
    benchmark = Benchmark(data(), [SklearnExtractor("pca", PCA(2, random_state=0))],
                          stability_config=StabilityConfig(repeats=2))
    context = benchmark._context()
    plan = benchmark.plan(context)
    assert pickle.loads(pickle.dumps(plan.jobs)) == plan.jobs
    restored = pickle.loads(pickle.dumps(context))
    assert Benchmark.plan(benchmark, restored).jobs == plan.jobs  # the same keys from the unpickled context


def norms(job, inputs, context, timings):
    """A stage a user might add: the Frobenius norm of the embedding."""
    return float(np.linalg.norm(inputs["embedding"].matrix))


def test_a_stage_plugs_in_by_registering_itself(monkeypatch):
    """A new stage reading the embedding appears in every chain, keyed on what it declares."""
    monkeypatch.setattr(registry, "_REGISTRY", {p: dict(s) for p, s in registry._REGISTRY.items()})
    registry.stage("benchmark", "norms", version=1, reads=("embedding",))(norms)
    plan = Benchmark(data(), [SklearnExtractor("pca", PCA(2, random_state=0))]).plan()
    assert "norms" in plan.chain_keys[0]
    job = next(j for j in plan.jobs if j.stage == "norms")
    assert job.needs == {"embedding": plan.chain_keys[0]["embedding"]}


# ----------------------------------------------------------------------------- retrieval
def retrieval_keys(relevance_shift: int = 0, query_shift: float = 0.0, name: str = "pca") -> dict[str, str]:
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(8, 5)) + query_shift, rng.normal(size=(20, 5))
    relevance = [(i, (i + relevance_shift) % 20, 1) for i in range(8)]
    dataset = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    bench = RetrievalBenchmark(dataset, [SklearnExtractor(name, PCA(3, random_state=0))],
                               retrieval_config=RetrievalConfig(cutoffs=[1, 5], bidirectional=True))
    return bench.plan().chain_keys[0]


def test_retrieval_keys_follow_what_each_stage_reads():
    base = retrieval_keys()
    diff = lambda other: {s for s in base if base[s] != other[s]}  # noqa: E731
    assert diff(retrieval_keys(name="renamed")) == {"assemble"}
    assert diff(retrieval_keys(relevance_shift=1)) == {"rank_forward", "rank_reverse", "assemble"}
    assert diff(retrieval_keys(query_shift=1.0)) == set(base)


# The table of docs/architecture.md: what each stage's key hashes besides its stage name and code version.
KEY_TABLE = {
    ("benchmark", "extract"): ((), {"inputs", "fit_targets", "extractor"}, {"numpy"}),
    ("benchmark", "embedding"): (("extract",), {"output"}, set()),
    ("benchmark", "compress"): (("embedding",), {"extractor"}, {"numpy", "scikit-learn"}),
    ("benchmark", "budget"): (("embedding", "compress"), {"targets", "groups"}, set()),
    ("benchmark", "score"): (("embedding", "compress", "budget"), {"targets"}, {"overlapindex"}),
    ("benchmark", "stability"): (("embedding", "compress", "budget"), {"targets"}, {"overlapindex"}),
    ("benchmark", "stability_round"): (("embedding", "compress", "budget"), {"targets"}, {"overlapindex"}),
    ("benchmark", "metrics"): (("embedding", "compress", "budget"), {"targets", "groups"}, set()),
    ("benchmark", "diagnose"): (("embedding", "score", "compress", "budget"), {"targets", "groups"}, {"separatix"}),
    ("benchmark", "assemble"): (("embedding", "score", "compress", "budget", "stability", "metrics", "diagnose"),
                                {"name", "output", "view", "extractor"}, set()),
    ("benchmark", "referee"): (("embedding", "compress", "budget"), {"targets", "groups"}, set()),
    ("retrieval", "encode"): ((), {"query_inputs", "gallery_inputs", "extractor"}, {"numpy"}),
    ("retrieval", "compress"): (("encode",), {"extractor"}, {"numpy", "scikit-learn"}),
    ("retrieval", "endpoints"): (("encode", "compress"), set(), set()),
    ("retrieval", "rank_forward"): (("endpoints",), {"relevance"}, set()),
    ("retrieval", "rank_reverse"): (("endpoints",), {"relevance"}, set()),
    ("retrieval", "assemble"): (("encode", "rank_forward", "compress", "rank_reverse"), {"name", "extractor"},
                                set()),
}


def test_every_stage_declares_exactly_the_documented_key_parts():
    declared = {(d.pipeline, d.name): ((*d.reads, *d.optional_reads), set(d.context), set(d.packages))
                for pipeline in ("benchmark", "retrieval") for d in registry.pipeline_stages(pipeline)}
    assert declared == KEY_TABLE


def test_each_stage_config_fingerprint_holds_every_setting_it_reads():
    benchmark = Benchmark(data(), [SklearnExtractor("pca", PCA(2, random_state=0))],
                          stability_config=StabilityConfig(repeats=3),
                          metrics=[CallableMetric("spread", spread, cache_identity="spread-v1")])
    settings, configs = benchmark.settings, {}
    for definition in registry.pipeline_stages("benchmark"):
        configs[definition.name] = definition.enabled_config(settings, None)[1]
    scoring = {"overlap": settings.scoring_config.fingerprint(), "continuous": settings.continuous_config.fingerprint()}
    assert configs["score"] == scoring  # a chain that does not say its target type: both configs
    assert configs["stability"] == {"stability": settings.stability_config.fingerprint(), "protocol_version": 2,
                                    **scoring}
    assert configs["diagnose"] == {"separatix": settings.separatix_config.fingerprint(), **scoring,
                                   "overlap_max_dense_bytes": None}
    assert configs["metrics"]["metrics"][0]["cache_identity"] == "spread-v1"
