"""`tfam study`: run one of the studies that answer the source documents' claims and questions."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from tfam.cli.common import add_command

EPILOG = """examples:
  tfam study --list                                       the studies, their claims and times
  tfam study positions --profile tiny --out runs/study-positions
  tfam study flash --profile quick --seeds 3 --out runs/study-flash
  tfam study attention-vs-rnn --profile quick --out runs/study-rnn
  tfam study long-sequences --profile full --device cuda --out runs/study-long-cuda
  tfam study heads --profile full --jobs 2 --out runs/study-heads   two records at a time

A study writes DIR/results.json (every condition's record, appended as soon as it is measured),
its figures (PNG) and DIR/report.md (the claim, the setup, tables, figures and a conclusion
computed from the measured numbers). Rerun the same command after a crash: what
results.json holds is skipped. Profiles: tiny (seconds; CI), quick (minutes on a 2-core CPU),
full (hours). Accuracies are means ± standard deviation over --seeds (default 3); a difference
counts only when it exceeds twice its standard error. --jobs N computes the records of a study
made of independent training runs in N processes (each with cores / N torch threads), then
writes the report; studies that time things run one record at a time.
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "study",
        "run a study: a claim of the source documents, measured (report, results, figures)",
        "Run one study: measure a claim or question of the source documents and write "
        "report.md, results.json and figures.",
        EPILOG,
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="the study (tfam study --list)")
    p.add_argument("--list", action="store_true", help="list the studies, claims and times")
    p.add_argument("--profile", default="tiny", metavar="PROFILE",
                   help="tiny, quick or full (default: tiny)")  # fmt: skip
    p.add_argument("--seeds", default=None, metavar="N",
                   help="seeds per condition (default: the study's, 3)")  # fmt: skip
    p.add_argument("--out", default=None, metavar="DIR", help="the output folder")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu (default), or cuda / cuda:N for the studies whose profiles have "
                   "CUDA settings (longer lengths; tfam study --list shows them)")  # fmt: skip
    p.add_argument("--jobs", default="1", metavar="N",
                   help="records computed in N parallel processes (default 1; studies of "
                   "independent training runs only)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def list_studies() -> str:
    from tfam.studies import PROFILES, STUDIES

    lines = []
    for name in sorted(STUDIES):
        study = STUDIES[name]
        times = ", ".join(f"{p} {study.profiles[p].expected}" for p in PROFILES)
        lines.append(f"{name}  ({times})")
        lines += textwrap.wrap(study.claim, 96, initial_indent="    ", subsequent_indent="    ")
        measured = [f"{p} {study.profiles[p].measured}" for p in PROFILES
                    if study.profiles[p].measured]  # fmt: skip
        if measured:
            lines.append("    measured: " + "; ".join(measured))
        cuda = [f"{p} {study.profiles[p].cuda_expected}".rstrip() for p in PROFILES
                if study.profiles[p].cuda is not None]  # fmt: skip
        if cuda:
            lines.append("    on CUDA (--device cuda): " + "; ".join(cuda))
        if study.parallel:
            lines.append("    --jobs N: N records at a time, in parallel processes")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tfam.studies import PROFILES, Progress, get_study
    from tfam.studies.base import require_device

    if args.list:
        print(list_studies())
        return 0
    if not args.name:
        raise ValueError("a study NAME is required (tfam study --list shows them)")
    study = get_study(args.name)
    if args.profile not in PROFILES:
        raise ValueError(f"--profile {args.profile!r} is invalid: expected one of "
                         + ", ".join(PROFILES))  # fmt: skip
    seeds = None
    if args.seeds is not None:
        try:
            seeds = int(args.seeds)
        except ValueError:
            seeds = -1
        if seeds < 1:
            raise ValueError(f"--seeds {args.seeds!r} is invalid: expected an int >= 1")
    if not args.out:
        raise ValueError("--out DIR is required: the folder for report.md, results.json and "
                         "the figures")  # fmt: skip
    try:
        jobs = int(args.jobs)
    except ValueError:
        raise ValueError(f"--jobs {args.jobs!r} is invalid: expected an int >= 1") from None
    study.settings_for(args.profile, args.device)  # a bad --device fails before any work
    study.check_jobs(jobs)
    require_device(args.device)
    prof = study.profiles[args.profile]
    expected = prof.expected if args.device == "cpu" else prof.cuda_expected or "not measured"
    print(f"tfam study {study.name} ({args.profile} on {args.device}, expected {expected}): "
          f"{study.title}", file=sys.stderr)  # fmt: skip
    result = study.run(args.profile, seeds, args.out, Progress(enabled=not args.quiet),
                       device=args.device, jobs=jobs)  # fmt: skip
    for line in result.get("conclusions", []):
        print(f"- {line}")
    print(f"wrote {args.out}/report.md, results.json and figures ({result['seconds']:.0f} s)")
    return 0
