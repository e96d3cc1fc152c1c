"""Stage purity: an artifact holds only what its key hashes.

Jobs with one key are one job, shared by every chain that needs it, and a cache hands
the artifact to later runs.  So every registered stage of every pipeline must produce
byte-identical artifacts when a fact it does not declare changes (chain and extractor
names, extractor order, which equal object stands for a setting), and its key must
change when a fact it declares changes.

The test runs small real benchmarks of all three pipelines twice — the second time with
every extractor renamed, the extractors in reverse order, and equal but distinct objects
— with every stage in the plan (stability, metrics that fail, Separatix, a memory budget,
compression variants including one that is not applied and warns, target views, named
outputs, a supervised extractor).  It then compares each job's encoded artifact by key.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import pickle
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
from sklearn.decomposition import PCA, TruncatedSVD
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, CallableMetric, DatasetIdentity, EmbeddingCompressionConfig,
                           LinearProbeMetric, MemoryConfig, OverlapScoringConfig, PrecomputedExtractor,
                           RetrievalBenchmark, RetrievalConfig, RetrievalDataset, SeparatixConfig, SklearnExtractor,
                           StabilityConfig, ZeroShotBenchmark, ZeroShotDataset)
from vertebrae.artifacts.codecs import encode_artifact
from vertebrae.execution import registry
from vertebrae.execution.jobs import run_job
from vertebrae._base.fingerprint import content_sha256
from vertebrae.families.front_door import RoundSettings
from vertebrae.inputs.views import TargetView, TargetViewConfig

IDENTITY = DatasetIdentity.declared("purity", "1")
PIPELINES = ("benchmark", "retrieval", "zero_shot")
#: The raw embedding (``none``); pca2 is applied; pca64 asks for more dimensions than any embedding here has, so it
#: warns and is not applied.
VARIANTS = [EmbeddingCompressionConfig(), EmbeddingCompressionConfig(method="pca", n_components=2, random_state=0),
            EmbeddingCompressionConfig(method="pca", n_components=64, random_state=0)]


# ----------------------------------------------------------------------------- encoded artifacts
def encoded(pipeline: str, stage: str, artifact: Any) -> Any:
    """What a store would hold for ``artifact``: its codec's files (name -> bytes).

    A stage without a codec (``embedding``, ``budget``, ``endpoints``, most zero-shot
    stages) has no stored form, so its artifact is compared by a canonical hash of its
    whole content instead (:func:`content_digest`): every dataclass field, array and value.
    """
    codec = registry.get_stage(pipeline, stage).codec
    if codec is None and stage == "fit":
        # A fitted model object (zero-shot), never stored: its pickled state, minus the wrapper's display name
        # (a label on the object the user passed, not something the fit computed).
        state = copy.deepcopy(artifact)
        for obj in (state, getattr(state, "extractor", None)):
            if obj is not None and hasattr(obj, "name"):
                obj.name = ""
        return hashlib.sha256(pickle.dumps(state)).hexdigest()
    if codec is None:
        return content_digest(artifact)
    return encode_artifact(codec.encode(artifact))


def content_digest(value: Any) -> str:
    return content_sha256(_content(value))


def _content(value: Any) -> Any:
    """``value`` as nested lists/dicts of arrays and scalars (dataclasses by field, other objects by ``__dict__``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__,
                **{f.name: _content(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, Mapping):
        return {key: _content(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_content(item) for item in value]
    if hasattr(value, "__dict__") and not hasattr(value, "tocsr"):
        return {"type": type(value).__name__, **{k: _content(v) for k, v in vars(value).items()}}
    return value


def run_all_jobs(front: Any) -> tuple[Any, dict[str, Any]]:
    """(plan, key -> encoded artifact) of every job of ``front``'s plan, run in plan order."""
    context = front._context()
    plan = front.plan(context)
    artifacts: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for job in plan.jobs:
            artifacts[job.key], _ = run_job(job, {stage: artifacts[key] for stage, key in job.needs.items()}, context)
    return plan, {job.key: encoded(job.pipeline, job.stage, artifacts[job.key]) for job in plan.jobs}


# ----------------------------------------------------------------------------- the three benchmarks
class TwoOutputs:
    """A multi-output extractor: the input and its double, as named outputs."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fit(self, X, y=None):
        return self

    def output_names(self):
        return ["a", "b"]

    def transform_many(self, X):
        return {"a": np.asarray(X, dtype=np.float64), "b": np.asarray(X, dtype=np.float64) * 2.0}

    def transform(self, X):
        return self.transform_many(X)["a"]

    def recipe(self):
        return {"type": "two-outputs", "name": self.name}


def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    return {"score": float(np.asarray(embeddings.std())), "warnings": ["spread is descriptive"]}


def fails(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    raise ValueError("this metric always fails")


def breaks_contract(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    return {"score": 1.0, "surprise": True}


def labeled(y_shift: int = 0, x_shift: float = 0.0, group_mod: int = 5) -> BenchmarkDataset:
    X, y = gaussian_classes(n_per_class=12, n_classes=3, dim=5)
    y = (y + y_shift) % 3
    coarse = np.where(y == 0, "zero", "other")
    return BenchmarkDataset.from_arrays(X + x_shift, y, identity=IDENTITY, groups=np.arange(len(y)) % group_mod
                                        ).with_target_views([TargetView("coarse", coarse)])


def labeled_benchmark(dataset: BenchmarkDataset, prefix: str = "", reverse: bool = False, seed: int = 0,
                      views: tuple[str, ...] = ("coarse",), repeats: int | str = 2) -> Benchmark:
    X = np.array(dataset.extractor_input, copy=True)  # an equal, distinct matrix
    extractors = [PrecomputedExtractor(f"{prefix}raw", X), SklearnExtractor(f"{prefix}pca", PCA(3, random_state=seed)),
                  SklearnExtractor(f"{prefix}lda", LinearDiscriminantAnalysis(n_components=2), supervised=True),
                  TwoOutputs(f"{prefix}net")]
    metrics = [CallableMetric("spread", spread, aggregate_valid=False), CallableMetric("fails", fails),
               CallableMetric("breaks", breaks_contract)]
    bench = Benchmark(dataset, extractors[::-1] if reverse else extractors, metrics=metrics,
                      scoring_config=OverlapScoringConfig(k=3),
                      stability_config=StabilityConfig(repeats=repeats, **({"min_repeats": 2} if repeats == "auto" else {})),
                      separatix_config=SeparatixConfig(), memory_config=MemoryConfig(max_scoring_bytes=1 << 30),
                      compression=VARIANTS, target_view_config=TargetViewConfig(views=views) if views else None,
                      referee=LinearProbeMetric(n_splits=2))
    # the referee round's settings: every chain a finalist, so the referee stage is in the plan
    bench.settings = RoundSettings(bench.settings, {"referee_finalists": frozenset(c.name for c in bench.chains())})
    return bench


def retrieval_benchmark(prefix: str = "", reverse: bool = False, relevance_shift: int = 0, query_shift: float = 0.0,
                        seed: int = 0) -> RetrievalBenchmark:
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(8, 5)) + query_shift, rng.normal(size=(20, 5))
    relevance = [(i, (i + relevance_shift) % 20, 1) for i in range(8)]
    dataset = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    extractors = [SklearnExtractor(f"{prefix}pca", PCA(3, random_state=seed)),
                  SklearnExtractor(f"{prefix}svd", TruncatedSVD(4, random_state=0))]
    return RetrievalBenchmark(dataset, extractors[::-1] if reverse else extractors, compression=VARIANTS,
                              retrieval_config=RetrievalConfig(cutoffs=[1, 5], bidirectional=True))


WORDS = {"sport": ["goal", "match", "team", "score"], "food": ["pasta", "bread", "cheese", "soup"],
         "tech": ["laptop", "phone", "chip", "cloud"]}


def zero_shot_benchmark(prefix: str = "", reverse: bool = False, label_shift: int = 0, prompt: str = "",
                        text_suffix: str = "", svd_seed: int = 0) -> ZeroShotBenchmark:
    rng = np.random.default_rng(0)
    texts, labels = [], []
    for label, words in WORDS.items():
        for i in range(8):
            chosen = rng.choice(words, size=2, replace=False)
            texts.append(f"{chosen[0]} {chosen[1]} {i}{text_suffix}")
            labels.append(label)
    names = list(WORDS)
    labels = [names[(names.index(label) + label_shift) % 3] for label in labels]
    source = BenchmarkDataset.from_arrays(texts, labels, identity=IDENTITY)
    dataset = ZeroShotDataset.from_prompts(source, {label: " ".join(words) + prompt for label, words in WORDS.items()})
    svd = make_pipeline(TfidfVectorizer(), TruncatedSVD(3, random_state=svd_seed))
    encoders = [SklearnExtractor(f"{prefix}tfidf", TfidfVectorizer()), SklearnExtractor(f"{prefix}svd", svd)]
    return ZeroShotBenchmark(dataset, encoders[::-1] if reverse else encoders, compression=VARIANTS,
                             scoring_config=OverlapScoringConfig(k=3))


FRONTS: dict[str, Callable[..., Any]] = {
    "benchmark": lambda **kw: labeled_benchmark(labeled(), **kw),
    "benchmark:auto": lambda **kw: labeled_benchmark(labeled(), repeats="auto", **kw),  # adaptive repeats
    "retrieval": retrieval_benchmark,
    "zero_shot": zero_shot_benchmark,
}


#: Stages a front's plan leaves out because another front exercises them (fixed and adaptive stability repeats).
EXERCISED_ELSEWHERE = {"benchmark": {"stability_round"}, "benchmark:auto": {"stability"}}


@pytest.fixture(scope="module", params=[*PIPELINES, "benchmark:auto"])
def two_runs(request):
    """The pipeline's plan and artifacts, run as given and with undeclared facts changed."""
    front = request.param
    base = run_all_jobs(FRONTS[front]())
    renamed = run_all_jobs(FRONTS[front](prefix="renamed_", reverse=True))
    return front.partition(":")[0], base, renamed, front


def test_every_registered_stage_is_exercised(two_runs):
    pipeline, (plan, _), _, front = two_runs
    expected = {d.name for d in registry.pipeline_stages(pipeline)} - EXERCISED_ELSEWHERE.get(front, set())
    assert {job.stage for job in plan.jobs} == expected


def test_undeclared_facts_change_no_key_and_no_artifact_byte(two_runs):
    """Names, order and object identity are not declared (except by assemble, which declares ``name``)."""
    pipeline, (plan, base), (renamed_plan, renamed), _ = two_runs
    naming = {d.name for d in registry.pipeline_stages(pipeline) if "name" in d.context}
    stage_of = {job.key: job.stage for job in plan.jobs}
    keys = {key for key, stage in stage_of.items() if stage not in naming}
    assert keys == {job.key for job in renamed_plan.jobs if job.stage not in naming}
    impure = sorted(stage_of[key] for key in keys if base[key] != renamed[key])
    assert impure == [], f"{pipeline} stages whose artifact holds a fact their key does not hash: {impure}"


# ----------------------------------------------------------------------------- declared facts change keys
def _pairs() -> dict[str, list[tuple[str, dict[str, str], dict[str, str]]]]:
    """Per pipeline: (fact, a chain's stage -> key, the same chain's keys with only that fact changed)."""
    def chains(front: Any) -> dict[str, dict[str, str]]:
        plan = front.plan()
        return {chain.name: keys for chain, keys in zip(plan.chains, plan.chain_keys)}

    bench = chains(labeled_benchmark(labeled()))
    pca, lda = "pca+pca2[target=coarse]", "lda+pca2[target=coarse]"
    pairs = {"benchmark": [
        ("inputs", bench[pca], chains(labeled_benchmark(labeled(x_shift=0.5)))[pca]),
        ("targets", bench[pca], chains(labeled_benchmark(labeled(y_shift=1)))[pca]),
        ("fit_targets", bench[lda], chains(labeled_benchmark(labeled(y_shift=1)))[lda]),
        ("groups", bench[pca], chains(labeled_benchmark(labeled(group_mod=4)))[pca]),
        ("extractor", bench[pca], chains(labeled_benchmark(labeled(), seed=1))[pca]),
        ("output", bench["net:a+pca2[target=coarse]"], bench["net:b+pca2[target=coarse]"]),
        ("view", chains(labeled_benchmark(labeled(), views=()))["pca+pca2"], bench[pca]),
        ("name", bench[pca], chains(labeled_benchmark(labeled(), prefix="x"))["x" + pca]),
    ]}
    retrieval = chains(retrieval_benchmark())
    pairs["retrieval"] = [
        ("query_inputs", retrieval["pca+pca2"], chains(retrieval_benchmark(query_shift=1.0))["pca+pca2"]),
        ("relevance", retrieval["pca+pca2"], chains(retrieval_benchmark(relevance_shift=1))["pca+pca2"]),
        ("extractor", retrieval["pca+pca2"], chains(retrieval_benchmark(seed=1))["pca+pca2"]),
        ("name", retrieval["pca+pca2"], chains(retrieval_benchmark(prefix="x"))["xpca+pca2"]),
    ]
    zero_shot = chains(zero_shot_benchmark())
    pairs["zero_shot"] = [
        ("inputs", zero_shot["svd+pca2"], chains(zero_shot_benchmark(text_suffix=" extra"))["svd+pca2"]),
        ("targets", zero_shot["svd+pca2"], chains(zero_shot_benchmark(label_shift=1))["svd+pca2"]),
        ("prompts", zero_shot["svd+pca2"], chains(zero_shot_benchmark(prompt=" news"))["svd+pca2"]),
        ("extractor", zero_shot["svd+pca2"], chains(zero_shot_benchmark(svd_seed=1))["svd+pca2"]),
        ("name", zero_shot["svd+pca2"], chains(zero_shot_benchmark(prefix="x"))["xsvd+pca2"]),
    ]
    return pairs


#: Facts no fixture here can change alone: the retrieval gallery (changing it changes the relevance's targets too).
UNCOVERED = {("retrieval", "gallery_inputs")}


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_each_declared_fact_changes_the_key(pipeline):
    pairs = _pairs()[pipeline]
    covered = {fact for fact, _, _ in pairs}
    for definition in registry.pipeline_stages(pipeline):
        missing = set(definition.context) - covered - {fact for p, fact in UNCOVERED if p == pipeline}
        assert not missing, f"{pipeline}/{definition.name} declares {missing}, which no case here changes"
        for fact, before, after in pairs:
            if fact in definition.context and definition.name in before:
                assert before[definition.name] != after[definition.name], \
                    f"{pipeline}/{definition.name} declares {fact!r}, but changing it kept the key"
