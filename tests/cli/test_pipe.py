"""`tfam explain ... | head`: a reader that leaves early is not an error. The output (~0.2 MB
of JSON) is larger than a pipe buffer, so the writer meets the closed pipe."""

from __future__ import annotations

import subprocess
import sys


def test_a_closed_pipe_is_not_a_traceback() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfam",
            "explain",
            "vit_large_patch16_224",
            "--blocks",
            "all",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # like `head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert first.strip() == b"{"
    assert "Traceback" not in err and "BrokenPipeError" not in err
