"""The trainer's own errors: one line each, naming what failed and what was kept.

They subclass ValueError so that the command line reports them as one line and a non-zero
exit, like every other refused input.
"""

from __future__ import annotations

__all__ = ["CheckpointSaveError", "NonFiniteLossError", "TrainingError"]


class TrainingError(ValueError):
    """A run that cannot go on (the message says why and what was kept)."""


class NonFiniteLossError(TrainingError):
    """The loss or the gradients became inf/NaN: the run diverged."""


class CheckpointSaveError(TrainingError):
    """A checkpoint could not be written (disk full, no permission, ...)."""
