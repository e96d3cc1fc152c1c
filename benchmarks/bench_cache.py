"""Artifact store throughput: a 20,000 x 384 float32 embedding written and read through FsspecStore.

    python benchmarks/bench_cache.py [--repeats N] [--rows N]

Each backend is compared with the bare fsspec call moving the same bytes (``pipe_file`` of the
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
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
