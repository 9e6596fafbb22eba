"""The explain table: its rows, the FLOP conventions, and its text and JSON forms."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# Approximate FLOPs per element of the element-wise steps (see the package docstring).
FLOPS_PER_ELEMENT: dict[str, int] = {
    # mean (1 add), centre (1 sub), square (1 mul), variance sum (1 add), normalise (1 mul by
    # the row's 1/std), gamma (1 mul), beta (1 add); the per-row sqrt is not counted.
    "layernorm": 7,
    # square, sum, normalise, gamma.
    "rmsnorm": 4,
    # running max (1), subtract max (1), exp (1), sum (1), divide (1).
    "softmax": 5,
    # BatchNorm at inference: the running statistics and gamma, beta fold to one scale and
    # one shift per channel (1 mul, 1 add).
    "batchnorm": 2,
    "relu": 1,
    # 0.5 * x * (1 + erf(x / sqrt 2)), or its tanh form x^3, poly, tanh, add, mul.
    "gelu": 8,
    "gelu_tanh": 8,
    # x * sigmoid(1.702 x): scale, negate, exp, add, divide, multiply.
    "quick_gelu": 6,
    # x * sigmoid(x): negate, exp, add, divide, multiply.
    "silu": 5,
    # (e^x - e^-x) / (e^x + e^-x).
    "tanh": 5,
}

BLOCK_MODES = ("first", "all")

FLOP_NOTE = (
    "FLOPs: a multiply-add = 2 FLOPs (matmul 2*m*k*n); bias, residual and position "
    "adds 1 per element; per element "
    + ", ".join(f"{k} {v}" for k, v in FLOPS_PER_ELEMENT.items())
    + "; reshapes, [CLS] and dropout 0."
)


@dataclass(frozen=True)
class ExplainRow:
    """One step of the table.

    ``input_shape``/``output_shape`` are the traced tensor shapes, batch dimension first;
    ``input_symbols``/``output_symbols`` are the same shapes in the source documents' symbols,
    without the batch dimension. ``params`` and ``flops`` are exact counts (FLOPs for the whole
    batch). ``level`` 0 rows add up to the totals; ``level`` 1 rows break down the level 0 row
    above them (MHSA, MLP) and are already included in it. ``block`` is the block ("1", or
    "2..12" for the summary row), empty outside the blocks. ``score_bytes`` (attention rows):
    the bytes of the score entries the kernel holds at once (its ``cost()``), for the batch;
    0 on other rows.
    """

    step: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    input_symbols: str
    output_symbols: str
    params: int
    flops: int
    block: str = ""
    level: int = 0
    note: str = ""
    score_bytes: int = 0


@dataclass
class ExplainTable:
    """The result of :func:`tfam.explain.explain`; ``print(table)`` shows it as aligned text.

    ``sample`` names one element of the batch in the totals line ("image", "sequence")."""

    name: str
    family: str
    config: dict[str, Any]
    batch_size: int
    blocks: str
    symbols: dict[str, int]
    header: list[str]
    rows: list[ExplainRow]
    total_params: int
    total_flops: int
    notes: list[str] = field(default_factory=list)
    sample: str = "image"

    def to_dict(self) -> dict[str, Any]:
        """Everything in plain JSON types (shapes as lists)."""
        rows = []
        for row in self.rows:
            d = asdict(row)
            d["input_shape"] = list(row.input_shape)
            d["output_shape"] = list(row.output_shape)
            rows.append(d)
        return {
            "name": self.name,
            "family": self.family,
            "config": self.config,
            "batch_size": self.batch_size,
            "blocks": self.blocks,
            "symbols": dict(self.symbols),
            "rows": rows,
            "total_params": self.total_params,
            "total_flops": self.total_flops,
            "flop_conventions": {
                "multiply_add": 2,
                "add": 1,
                "scale": 1,
                "per_element": dict(FLOPS_PER_ELEMENT),
            },
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_text(self) -> str:
        """Aligned columns; shapes per sample when the batch size is 1, with thousands
        separators in the counts."""
        with_batch = self.batch_size != 1

        def shape(s: tuple[int, ...]) -> str:
            return " x ".join(str(v) for v in (s if with_batch else s[1:]))

        def symbols(s: str) -> str:
            return f"B x {s}" if with_batch else s

        head = ("block", "step", "input", "output", "in symbols -> out symbols", "params", "FLOPs")
        body: list[tuple[str, ...]] = []
        note_marks: list[str] = []
        for row in self.rows:
            step = ("  " * row.level) + row.step
            if row.note:
                # Repeated notes (every block's LN, ...) share one footnote.
                if row.note not in note_marks:
                    note_marks.append(row.note)
                step += f" [{note_marks.index(row.note) + 1}]"
            body.append(
                (
                    row.block,
                    step,
                    shape(row.input_shape),
                    shape(row.output_shape),
                    f"{symbols(row.input_symbols)} -> {symbols(row.output_symbols)}",
                    f"{row.params:,}",
                    f"{row.flops:,}",
                )
            )
        total = ("", "total", "", "", "", f"{self.total_params:,}", f"{self.total_flops:,}")
        widths = [max(len(r[i]) for r in [head, total, *body]) for i in range(len(head))]
        right = {5, 6}  # numbers align right

        def line(cells: tuple[str, ...]) -> str:
            out = [
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths))
            ]
            return "  ".join(out).rstrip()

        rule = "  ".join("-" * w for w in widths)
        lines = [*self.header, "", line(head), rule]
        lines += [line(r) for r in body]
        lines += [rule, line(total)]
        lines.append(
            f"total: {self.total_params:,} parameters, {human(self.total_flops)}FLOPs "
            f"for a batch of {self.batch_size} "
            f"({human(self.total_flops // self.batch_size)}FLOPs per {self.sample})"
        )
        if note_marks or self.notes:
            lines.append("")
        for i, note in enumerate(note_marks, start=1):
            lines.append(f"[{i}] {note}")
        lines += self.notes
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def human(n: int) -> str:
    """17_582_000_000 -> '17.58 G' (the caller appends the unit)."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= factor:
            return f"{n / factor:.2f} {prefix}"
    return f"{n} "
