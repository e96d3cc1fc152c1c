"""The one wrapper around calls into user code (an extractor's or encoder's fit, transform, encode).

vertebrae's own errors pass through unchanged (they already name the argument and the fix);
any other exception becomes a :class:`~vertebrae.errors.UserCodeError` (an ``ExtractorError``)
that names the call, with the original exception as ``__cause__`` and its traceback as text
(what ``vertebrae run --traceback`` shows).  So does ``SystemExit`` (``sys.exit`` in user code), which
would end a run with the user's exit status instead of the CLI's documented codes; ``KeyboardInterrupt``
still stops everything.  torch's refusal to unpickle a checkpoint under ``weights_only`` (a multi-line
essay that suggests turning the protection off) becomes one line naming the file and the fix: convert it
to safetensors.
"""

from __future__ import annotations

import contextlib
import pickle
import traceback
from collections.abc import Iterator
from types import TracebackType

from ..errors import ExtractorError, UserCodeError, VertebraeError


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the block as user code; ``what`` names it in the error (``extractor 'a' failed in encode_queries``)."""
    try:
        yield
    except VertebraeError:
        raise
    except (Exception, SystemExit) as exc:  # SystemExit would end a run with the user's status, not the CLI's
        if isinstance(exc, pickle.UnpicklingError) and str(exc).startswith("Weights only load failed"):
            raise ExtractorError(f"{what}: the checkpoint {_torch_load_file(exc.__traceback__)} holds Python objects "
                                 "that torch.load(weights_only=True) refuses to unpickle, and vertebrae never loads a "
                                 "pickle that could run code: convert the checkpoint to safetensors (save the state "
                                 "dict with safetensors.torch.save_file, or a transformers model with "
                                 "save_pretrained(safe_serialization=True)) and load that") from exc
        failure = (f"it called sys.exit({'' if exc.code is None else repr(exc.code)}); raise an exception instead"
                   if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        raise UserCodeError(f"{what}: {failure}", "".join(traceback.format_exception(exc))) from exc


def _torch_load_file(trace: TracebackType | None) -> str:
    """The file ``torch.load`` was reading, quoted, from its frame in the traceback (``of the model`` when the
    traceback does not show it: "the checkpoint of the model holds ...")."""
    while trace is not None:
        frame = trace.tb_frame
        code = frame.f_code
        if code.co_name == "load" and code.co_filename.replace("\\", "/").endswith("torch/serialization.py"):
            source = frame.f_locals.get("f")
            if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__"):
                return repr(str(source))
        trace = trace.tb_next
    return "of the model"
