"""A callback for the resume test: the process SIGKILLs itself after a given optimiser step.

Loaded by ``train.py`` in a subprocess with ``+callbacks.kill={_target_: kill_at_step.KillAtStep, step: N}``
(``tests/cli`` on ``PYTHONPATH``): a real, uncatchable kill at an exact point, after the
``last.ckpt`` of an earlier step and with work done since that the resumed run must redo.
"""

from __future__ import annotations

import os
import signal

import lightning as L


class KillAtStep(L.Callback):
    def __init__(self, step: int) -> None:
        self.step = int(step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
