"""Quiet by default: what the libraries evalctl drives print on their own (transformers' weight-loading bars and
advice, torch's and sentence-transformers' warnings, the hub's and datasets' download bars, the model card's widget
bar during fine-tuning) tells an evalctl user nothing they can act on, and buries evalctl's own messages. evalctl
reports through its own messages and its own progress bars, which always pass `disable=` themselves and so stay;
`evalctl --verbose` leaves the libraries as they are. Settings the user exported are kept."""

from __future__ import annotations

import os
import warnings

QUIET_ENVIRONMENT = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # the hub's downloads, and every transformers bar ("Loading weights")
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "DATASETS_VERBOSITY": "error",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",  # any other library's tqdm bar that does not choose for itself (a bar given disable= does)
}


def quiet_libraries() -> None:
    """Before any library is imported: their bars and log warnings off, Python warnings ignored (evalctl issues none;
    the ones that reach a user come from the libraries)."""
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    warnings.simplefilter("ignore")
