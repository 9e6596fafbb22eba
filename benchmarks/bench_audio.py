"""How fast the audio front end is: seconds of compute per hour of audio, on one thread.

Times ``fbank`` on utterances of a few seconds one call each (as a corpus builder or data loader
calls it), the same audio in one batched call, ``normalize``, ``resample`` (44.1 kHz and 8 kHz
to 16 kHz) and ``load_audio`` of 16-bit WAV files, and prints each as seconds per hour of audio.

    python benchmarks/bench_audio.py [--minutes 6] [--seconds-each 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from tfam.data.audio import fbank, load_audio, normalize, resample, write_wav


def per_hour(seconds: float, audio_seconds: float) -> str:
    return f"{seconds:7.3f} s for {audio_seconds / 60:5.1f} min = {seconds * 3600 / audio_seconds:7.2f} s per hour"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=6.0, help="audio to process")
    parser.add_argument("--seconds-each", type=float, default=3.0, help="utterance length")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--files", type=int, default=20, help="WAV files for load_audio")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    each = int(16000 * args.seconds_each)
    count = max(1, int(args.minutes * 60 / args.seconds_each))
    utterances = [0.1 * torch.randn(each, generator=g) for _ in range(count)]
    total = count * args.seconds_each
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {count} utterances of {args.seconds_each:g} s"
    )
    fbank(utterances[0])  # warm the caches (filterbank, window)

    t = time.perf_counter()
    feats = [fbank(u) for u in utterances]
    print("fbank, one call per utterance:  ", per_hour(time.perf_counter() - t, total))
    t = time.perf_counter()
    fbank(torch.stack(utterances))
    print("fbank, one batched call:        ", per_hour(time.perf_counter() - t, total))
    t = time.perf_counter()
    for f in feats:
        normalize(f)
    print("normalize, per utterance:       ", per_hour(time.perf_counter() - t, total))
    for rate in (44100, 8000):
        x = [
            0.1 * torch.randn(int(rate * args.seconds_each), generator=g)
            for _ in range(count // 4 or 1)
        ]
        t = time.perf_counter()
        for u in x:
            resample(u, rate, 16000)
        print(
            f"resample {rate} -> 16000:       ",
            per_hour(time.perf_counter() - t, len(x) * args.seconds_each),
        )
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(args.files):
            paths.append(Path(tmp) / f"{i}.wav")
            write_wav(
                paths[-1],
                0.1 * torch.randn(int(44100 * args.seconds_each), generator=g),
                44100,
                durable=False,
            )
        t = time.perf_counter()
        for p in paths:
            load_audio(p)
        print(
            "load_audio, 16-bit 44.1 kHz:    ",
            per_hour(time.perf_counter() - t, args.files * args.seconds_each),
        )


if __name__ == "__main__":
    main()
