"""The documentation runs: every ```python block of README.md and docs/*.md runs in a fresh
process (in a temporary directory), every `tfam ...` line of a ```bash block parses with the
command line's own parser (a misspelled option fails), and the quick ones (`tfam list`,
`tfam explain`) run.

A block that needs a data set outside pip's reach or a long run says so in the markdown just
before it, ``<!-- not run: REASON -->``: it is still compiled, and reported as skipped with the
reason (never silently). New pages are picked up by the glob.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
QUICK = {"list", "explain"}  # commands that run in seconds and need no run directory
TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    page: str  # the page, relative to the repository
    line: int  # the line of its opening fence
    lang: str
    code: str
    not_run: str | None  # the reason of a `<!-- not run: ... -->` just before it

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown page, with the `not run` reason that precedes each."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        before = [ln for ln in lines[max(0, start - 3) : start] if ln.strip()]
        reason = NOT_RUN.search(before[-1]) if before else None
        page = str(path.relative_to(ROOT))
        out.append(
            Block(page, start + 1, m[1], "\n".join(body) + "\n", reason[1] if reason else None)
        )
        i += 1
    return out


ALL = [b for page in PAGES for b in blocks(page)]
PYTHON = [b for b in ALL if b.lang == "python"]


def shell_commands(block: Block) -> list[tuple[int, list[str]]]:
    """(line, argv after `tfam`) of every `tfam ...` command of a bash block (continuation
    lines joined, comments dropped); `torchrun ... -m tfam ...` counts too."""
    out = []
    pending, first = "", 0
    for offset, raw in enumerate(block.code.splitlines(), start=1):
        if not pending:
            first = block.line + offset
        pending += raw.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        words, pending = shlex.split(pending, comments=True), ""
        for stop in ("|", "&&", ";", ">", "2>", ">>", "<"):  # the command ends at a pipe
            if stop in words:
                words = words[: words.index(stop)]
        if words[:1] == ["tfam"]:
            out.append((first, words[1:]))
        elif words[:1] == ["torchrun"] and "-m" in words:
            at = words.index("-m")
            if words[at + 1 : at + 2] == ["tfam"]:
                out.append((first, words[at + 2 :]))
    return out


COMMANDS = [
    (f"{b.page}:{line}", argv)
    for b in ALL
    if b.lang in ("bash", "sh", "shell", "console")
    for line, argv in shell_commands(b)
]


def test_the_pages_have_blocks() -> None:
    """The collection itself works (an empty list would pass every test below)."""
    assert any(b.page == "README.md" for b in PYTHON)
    assert any(argv[:1] == ["train"] for _, argv in COMMANDS)
    assert any(argv[:1] == ["explain"] for _, argv in COMMANDS)


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    compile(block.code, block.where, "exec")  # a marked block must at least be Python
    if block.not_run:
        pytest.skip(f"{block.where}: not run: {block.not_run}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"{block.where} failed:\n{done.stderr[-3000:]}"


def parse(argv: list[str]):
    """The command line's own parse of ``argv`` (as `tfam` does it), without running it."""
    import tfam.cli

    parser = tfam.cli.build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as exit:
        raise AssertionError(f"does not parse (exit {exit.code})") from None
    trailing = getattr(args, "trailing", None)
    if extra and not (trailing and not any(e.startswith("-") and e != "-" for e in extra)):
        raise AssertionError(f"unrecognized arguments: {' '.join(extra)}")
    assert hasattr(args, "func"), "no command"
    return args


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_shell_line_parses(where: str, argv: list[str], capsys) -> None:
    try:
        parse(argv)
    except AssertionError as err:
        raise AssertionError(f"{where}: `tfam {shlex.join(argv)}` {err}") from None
    finally:
        capsys.readouterr()  # argparse's usage text, when it failed


QUICK_COMMANDS = [(w, a) for w, a in COMMANDS if a[:1] and a[0] in QUICK]


@pytest.mark.parametrize("where, argv", QUICK_COMMANDS, ids=[w for w, _ in QUICK_COMMANDS])
def test_quick_shell_line_runs(where: str, argv: list[str], capsys) -> None:
    import tfam.cli

    code = tfam.cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, f"{where}: `tfam {shlex.join(argv)}` exited {code}: {err[-2000:]}"
    assert out.strip(), f"{where}: `tfam {shlex.join(argv)}` printed nothing"


def test_a_misspelled_option_fails_the_parse(capsys) -> None:
    """The check can fail: an option the parser does not know is refused."""
    parse(["train", "vit", "--data", "digits", "--epochs", "2"])
    with pytest.raises(AssertionError, match="unrecognized arguments: --epocs 2"):
        parse(["train", "vit", "--data", "digits", "--epocs", "2"])
    with pytest.raises(AssertionError, match="does not parse"):
        parse(["trian", "vit"])
    capsys.readouterr()


def test_shell_commands_are_cut_at_pipes_and_joined_at_backslashes() -> None:
    block = Block(
        "x.md", 1, "bash",
        "tfam explain vit_tiny | head -3   # a comment\nmake demo\n"
        "torchrun --nproc_per_node 2 -m tfam train vit \\\n   --data digits\n",
        None,
    )  # fmt: skip
    assert shell_commands(block) == [
        (2, ["explain", "vit_tiny"]),
        (4, ["train", "vit", "--data", "digits"]),
    ]


def test_not_run_marks_are_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- not run: needs fashion-mnist -->\n```python\nx = 1\n```\n\n"
        "```python\ny = 2\n```\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        first, second = blocks(page)
    finally:
        ROOT = saved
    assert (first.line, first.not_run, first.code) == (4, "needs fashion-mnist", "x = 1\n")
    assert (second.line, second.not_run) == (8, None)
