"""The one input and output layer, shared with the bundled trainer: `hyperpod_trainer.fileio`.

The trainer's image is built from `assets/trainer` alone, so the layer lives there (standard
library only, no torch) and hyperpod-kit imports it from the trainer's package: installed into
the project's venv by `make setup`, or from `assets/trainer` of a plain checkout.
"""

from __future__ import annotations

import sys

try:
    from hyperpod_trainer import fileio
except ImportError:  # a checkout whose venv lacks the trainer package
    from hyperpod_kit.paths import TRAINER_DIR

    sys.path.insert(0, str(TRAINER_DIR))
    from hyperpod_trainer import fileio

__all__ = ["fileio"]
