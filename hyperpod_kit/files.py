"""The one input and output layer, shared with the bundled trainer: `hyperpod_trainer.fileio`.

The trainer's image is built from `assets/trainer` alone, so the layer lives there (standard
library only, no torch). hyperpod-kit's wheel ships the trainer's package beside its own
(`hyperpod_trainer`, the repository root's link to `assets/trainer/hyperpod_trainer`), and
imports the layer from it.
"""

from __future__ import annotations

from hyperpod_trainer import fileio

__all__ = ["fileio"]
