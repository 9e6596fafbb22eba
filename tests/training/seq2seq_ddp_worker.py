"""A tiny seq2seq run with token batches for the multi-process test: ``python
seq2seq_ddp_worker.py OUT`` (one process) or under ``torch.distributed.run --nproc_per_node 2``.
Writes the final model into OUT."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from test_seq2seq import CopySet, _copy_config  # noqa: E402

import tfam  # noqa: E402
from tfam.training import Seq2Seq, Trainer  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # No query/key/value bias: the key bias has an exactly zero gradient in theory, and Adam
    # would turn its rounding noise into full-size steps that no two summation orders share.
    model = tfam.create_model(
        "transformer",
        dim=32,
        heads=4,
        depth=1,
        ffn_dim=64,
        vocab_size=16,
        max_positions=16,
        dropout=0.0,
        norm_first=True,
        qkv_bias=False,
    )
    config = _copy_config(epochs=2, batch_tokens=96, accum_steps=2)
    Trainer(model, CopySet(120, 4), None, config, Path(sys.argv[1]), task=Seq2Seq()).fit()


if __name__ == "__main__":
    main()
