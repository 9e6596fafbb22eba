"""ListOps (Nangia & Bowman 2018), generated with the rules of Long Range Arena's generator
(Tay et al. 2020, ``lra_benchmarks/data/listops.py``): nested list operations whose value, a
digit, is the label (10 classes).

    load_listops("train")                     # SequenceSet: [<cls>] + tokens, label = the value
    expr = listops_expressions(3, seed=0)[0]  # "[MAX 2 9 [MIN 4 7 ] 0 ]" (one of them)
    listops_value("[MED 1 2 3 4 ]")           # 2

The rules (as LRA's generator, read in its repository): operators ``[MAX``, ``[MIN``, ``[MED``
(the median; of an even count the mean of the two middle values truncated to an integer, as
LRA's ``int(np.median(...))``: ``[MED 1 2 3 4 ]`` is 2) and ``[SM`` (the sum modulo 10);
values the digits 0-9; an expression closes with ``]``. A tree starts at depth 1; at a depth
below ``max_depth`` (10) a node is an operator with probability 0.25 (else a value; at
``max_depth`` always a value), and an operator takes ``randint(2, max_args)`` arguments
(``max_args`` = 10 in LRA's code: its flag's default, not 5), drawn depth first, then its
operator. A tree is kept when ``min_length < tokens < max_length`` (tokens: operators, values
and ``]``; LRA's parentheses ``( )`` are not tokens, and its brackets are, as LRA's issue #14
settled), and each expression is kept once per split. LRA keeps 500 < tokens < 2,000; tfam's
default is 500 < tokens < 1,000 (with ``<cls>`` at most 1,000 ids), so its sequences are at
most half as long as LRA's. Splits are drawn from Python's ``random.Random`` seeded per split
(``seed`` * 1000 + 0, 1, 2 for train, val, test): the same on every machine. A tree growing
past ``max_length`` is abandoned early (it would be rejected anyway), so the accepted trees
follow LRA's distribution, though not its random stream.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from tfam.data.sources.lra import SPECIALS, SequenceSet
from tfam.data.text.dataset import TEXT_SPLITS, TextDatasetInfo, check_text_split

__all__ = [
    "LISTOPS_INFO",
    "LISTOPS_OPERATORS",
    "LISTOPS_SIZES",
    "LISTOPS_VOCAB",
    "generate_expression",
    "listops_expressions",
    "listops_value",
    "load_listops",
]

MIN, MAX, MED, SUM_MOD, END = "[MIN", "[MAX", "[MED", "[SM", "]"
LISTOPS_OPERATORS = (MIN, MAX, MED, SUM_MOD)  # LRA's order (random.choice reads it)
VALUE_P = 0.25  # LRA: a node below max_depth is an operator with this probability
LISTOPS_VOCAB = (*SPECIALS, *(str(d) for d in range(10)), *LISTOPS_OPERATORS, END)
_ID = {t: i for i, t in enumerate(LISTOPS_VOCAB)}
_DIGITS = tuple(str(d) for d in range(10))
LISTOPS_SIZES = {"train": 10000, "val": 1000, "test": 1000}
_SPLIT_OFFSET = {s: i for i, s in enumerate(TEXT_SPLITS)}

LISTOPS_INFO = TextDatasetInfo.of_splits(
    "listops",
    len(LISTOPS_VOCAB),
    LISTOPS_SIZES,
    description=(
        "ListOps generated with Long Range Arena's rules (MAX, MIN, MED, SM over digits, depth "
        "<= 10, 2-10 arguments), 500 < tokens < 1,000 (LRA: < 2,000); label = the value (10 "
        "classes); seeded per split: " + " / ".join(f"{n:,} {s}" for s, n in LISTOPS_SIZES.items())
    ),
    classes=tuple(str(d) for d in range(10)),
    head="sequence",
)


class _TooLong(Exception):
    """An expression grew past max_length: it would be rejected, so it is abandoned early."""


def generate_expression(
    rng: random.Random, max_depth: int = 10, max_args: int = 10, max_length: int | None = None
) -> tuple[list[str], int]:
    """One random expression by LRA's rules (see the module): its tokens and its value (0-9,
    computed while it is drawn; :func:`listops_value` computes it again from the tokens).
    Draws in LRA's order: per node the operator-or-value draw, then an operator's argument
    count, its arguments depth first, then its operator, each a uniform draw made from
    ``rng.random()`` (the same distributions as LRA's ``randint``/``choice``, ~3x faster; not
    LRA's random stream). ``max_length``: abandoned (an internal exception; the caller draws
    again) as soon as its length reaches it."""
    tokens: list[str] = []
    draw = rng.random
    limit = max_length if max_length is not None else float("inf")

    def node(depth: int) -> int:
        r = draw() if depth < max_depth else 1.0
        if r > VALUE_P:
            value = int(draw() * 10)  # random.choice(range(10))
            tokens.append(_DIGITS[value])
            if len(tokens) >= limit:
                raise _TooLong
            return value
        at = len(tokens)
        tokens.append("")  # the operator's place: it is drawn after its arguments, as in LRA
        n = 2 + int(draw() * (max_args - 1))  # random.randint(2, max_args)
        values = [node(depth + 1) for _ in range(n)]
        op = LISTOPS_OPERATORS[int(draw() * 4)]  # random.choice(OPERATORS)
        tokens[at] = op
        tokens.append(END)
        if len(tokens) >= limit:
            raise _TooLong
        return _apply(op, values)

    value = node(1)
    return tokens, value


def _apply(op: str, values: Sequence[int]) -> int:
    if op == MIN:
        return min(values)
    if op == MAX:
        return max(values)
    if op == MED:
        # LRA's int(np.median(values)): of an even count the middle pair's mean, truncated
        # (values are >= 0, so floor division gives the same)
        ordered = sorted(values)
        half = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[half]
        return (ordered[half - 1] + ordered[half]) // 2
    if op == SUM_MOD:
        return sum(values) % 10
    raise ValueError(f"operator {op!r} is invalid: expected one of {', '.join(LISTOPS_OPERATORS)}")


def listops_value(expression: str | Sequence[str]) -> int:
    """Evaluate an expression written as tokens, e.g. ``"[MAX 2 9 [MIN 4 7 ] 0 ]"`` -> 9 (a
    stack of open operators; a one-line ValueError naming the token position when the
    expression is not well formed)."""
    tokens = expression.split() if isinstance(expression, str) else list(expression)
    stack: list[tuple[str, list[int]]] = []
    result: int | None = None
    for pos, tok in enumerate(tokens):
        if result is not None:
            raise ValueError(f"token {pos} ({tok!r}) follows a complete expression")
        if tok in LISTOPS_OPERATORS:
            stack.append((tok, []))
        elif tok == END:
            if not stack or not stack[-1][1]:
                raise ValueError(f"token {pos} (']') closes no operator with arguments")
            op, args = stack.pop()
            value = _apply(op, args)
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
        elif tok.isdigit() and len(tok) == 1:
            if not stack:
                result = int(tok)
            else:
                stack[-1][1].append(int(tok))
        else:
            raise ValueError(
                f"token {pos} ({tok!r}) is invalid: expected a digit, an operator or ]"
            )
    if result is None:
        raise ValueError(f"the expression is incomplete: {len(stack)} operator(s) left open")
    return result


def listops_expressions(
    n: int,
    *,
    seed: int = 0,
    min_length: int = 500,
    max_length: int = 1000,
    max_depth: int = 10,
    max_args: int = 10,
) -> list[tuple[str, int]]:
    """``n`` distinct (expression, value) pairs with ``min_length < tokens < max_length``,
    drawn from ``random.Random(seed)`` by LRA's rules (see the module)."""
    if not 0 <= min_length < max_length - 1:
        raise ValueError(
            f"min_length={min_length}, max_length={max_length} are invalid: expected "
            "0 <= min_length < max_length - 1"
        )
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[tuple[str, int]] = []
    while len(out) < n:
        try:
            tokens, value = generate_expression(rng, max_depth, max_args, max_length)
        except _TooLong:
            continue
        if not min_length < len(tokens) < max_length:
            continue
        text = " ".join(tokens)
        if text in seen:
            continue
        seen.add(text)
        out.append((text, value))
    return out


@functools.lru_cache(maxsize=8)
def _split(split: str, size: int, seed: int, min_length: int, max_length: int) -> SequenceSet:
    pairs = listops_expressions(
        size, seed=1000 * seed + _SPLIT_OFFSET[split], min_length=min_length, max_length=max_length
    )
    rows = [[_ID[t] for t in text.split()] for text, _ in pairs]
    return SequenceSet(
        rows,
        [v for _, v in pairs],
        LISTOPS_INFO.classes,
        LISTOPS_VOCAB,
        name=f"listops:{split}",
        texts=[text for text, _ in pairs],
    )


def load_listops(
    split: str = "train",
    *,
    size: int | None = None,
    seed: int = 0,
    min_length: int = 500,
    max_length: int = 1000,
) -> SequenceSet:
    """A split ("train", "val", "test") of ListOps: ``size`` expressions (default
    :data:`LISTOPS_SIZES`) with ``min_length < tokens < max_length``, as ``[<cls>] + token
    ids``; generated once per process (kept in memory) from ``seed``."""
    check_text_split(split)
    size = LISTOPS_SIZES[split] if size is None else int(size)
    return _split(split, size, int(seed), int(min_length), int(max_length))
