#!/usr/bin/env bash
# The checks CI cannot run: every extractor and the linear probe on CUDA against their CPU runs, the CUDA branch of
# resource profiling, the probe's GPU time, and dask scaling past two cores.  Run from the checkout on a machine
# with a GPU and vertebrae's dependencies importable (docs/gpu.md has the figures of the last run):
#
#     bash benchmarks/gpu_checks.sh OUTPUT_FOLDER [EMBEDDING_CACHE]
#
# EMBEDDING_CACHE: a folder holding the MiniLM states of the 1,500 tweets (bench_reference_metrics.py
# --embedding-cache); without it the probe is timed on the synthetic 20,000 x 384 case only.
set -o pipefail
out=${1:?usage: gpu_checks.sh OUTPUT_FOLDER [EMBEDDING_CACHE]}
cache=${2:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
status=0

python3 - <<'EOF' 2>&1 | tee "$out/machine.txt"
import os, platform, importlib.metadata as md
import torch
print(f"python {platform.python_version()}, {os.cpu_count()} cores, torch {torch.__version__}, "
      f"cuda {torch.version.cuda}, device {torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}")
for name in ("numpy", "scipy", "scikit-learn", "pandas", "transformers", "sentence-transformers", "tokenizers",
             "onnxruntime", "jax", "overlapindex", "separatix", "dask", "distributed"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} not installed")
EOF

# 1. Every GPU path against its CPU twin (tests skip, saying why, where a framework has no GPU build here).
timeout 240 python3 -m pytest -q -p no:cacheprovider -n 0 -rs -s -k cuda \
    tests/test_cuda.py tests/test_probe_solver.py tests/test_torch_extractor.py 2>&1 | tee "$out/cuda_tests.log" \
    || status=1

# 2. The probe on the GPU against the bare scikit-learn call, the overlap score and the same probe on the CPU.
cases=synthetic
[ -n "$cache" ] && cases=tweets,synthetic
timeout 300 python3 benchmarks/bench_reference_metrics.py --only none --probe-cases "$cases" --device cuda \
    --rounds 1 --probe-variants auto ${cache:+--embedding-cache "$cache"} 2>&1 | tee "$out/probe.log" || status=1

# 3. Dask past two cores: the sequential runner against DaskRunner and a bare dask map at 2, 4, 8 and 16 workers.
timeout 300 python3 benchmarks/bench_dask.py --workers 2,4,8,16 2>&1 | tee "$out/dask.log" || status=1
exit $status
