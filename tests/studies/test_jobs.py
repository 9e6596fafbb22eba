"""`tfam study NAME --jobs N`: records computed by worker processes equal the serial run's;
leftover worker records are merged on the next run; bad --jobs and timing studies are refused
in one line; a worker's ``once`` leaves a key another worker claimed."""

import re

import pytest

from tfam.cli import main
from tfam.studies import STUDIES, Progress, get_study
from tfam.studies.base import Context, ResultStore
from tfam.studies.jobs import JOBS_DIR, try_claim

pytestmark = pytest.mark.usefixtures("one_thread")

WALL_CLOCK = {"train_seconds"}


def test_two_jobs_give_the_serial_records(tmp_path):
    study = get_study("heads")
    serial = study.run("tiny", seeds=2, out_dir=tmp_path / "serial", progress=Progress(False))
    parallel = study.run("tiny", seeds=2, out_dir=tmp_path / "jobs", progress=Progress(False),
                         jobs=2)  # fmt: skip
    assert set(parallel["records"]) == set(serial["records"])
    for key, rec in serial["records"].items():
        other = parallel["records"][key]
        assert {k: v for k, v in rec.items() if k not in WALL_CLOCK} == {
            k: v for k, v in other.items() if k not in WALL_CLOCK
        }, key
    assert parallel["conclusions"] == serial["conclusions"]
    assert not (tmp_path / "jobs" / JOBS_DIR).exists()  # merged, then removed
    # The report says how its records were computed: the command with --jobs, the workers.
    report = (tmp_path / "jobs" / "report.md").read_text()
    assert "--seeds 2 --jobs 2 --out" in report and "by 2 worker processes of" in report
    assert "--jobs" not in (tmp_path / "serial" / "report.md").read_text()


def test_leftover_worker_records_are_merged(tmp_path):
    study = get_study("heads")
    settings = study.settings_for("tiny")
    (tmp_path / JOBS_DIR).mkdir()
    worker = ResultStore(tmp_path / JOBS_DIR / "records-0.json", "heads", "tiny", settings)
    first = study.run("tiny", seeds=1, out_dir=tmp_path / "ref", progress=Progress(False))
    key = next(iter(first["records"]))
    worker.put(key, {**first["records"][key], "acc": 0.125})  # a value no run measures
    out = study.run("tiny", seeds=1, out_dir=tmp_path, progress=Progress(False))
    assert out["records"][key]["acc"] == 0.125  # taken from the worker's file, not recomputed
    assert set(out["records"]) == set(first["records"])
    # A worker file of another profile is refused rather than mixed in.
    other = ResultStore(tmp_path / "x" / JOBS_DIR / "records-1.json", "heads", "quick",
                        study.settings_for("quick"))  # fmt: skip
    other.put(key, {"acc": 0.5})
    with pytest.raises(ValueError, match="another study, profile or settings"):
        study.run("tiny", seeds=1, out_dir=tmp_path / "x", progress=Progress(False))


def test_a_claimed_key_is_left_to_its_worker(tmp_path):
    (tmp_path / JOBS_DIR / "claims").mkdir(parents=True)
    assert try_claim(tmp_path, "a/b=1") and not try_claim(tmp_path, "a/b=1")
    store = ResultStore(tmp_path / "r.json", "heads", "tiny", {})
    ctx = Context("tiny", {}, [0], tmp_path, store, Progress(False),
                  claim=lambda key: try_claim(tmp_path, key))  # fmt: skip
    assert ctx.once("a/b=1", lambda: 1 / 0) is None and ctx.deferred == 1
    assert ctx.once("c", lambda: 7) == 7 and store.get("c") == 7 and ctx.ran == 1


@pytest.mark.parametrize("jobs", ["0", "x", "-2"])
def test_bad_jobs_are_refused(jobs, tmp_path, capsys):
    assert main(["study", "heads", "--jobs", jobs, "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert f"--jobs {jobs!r} is invalid" in err or f"--jobs {int(jobs)} is invalid" in err
    assert not (tmp_path / "results.json").exists()


def test_timing_studies_refuse_jobs(tmp_path, capsys):
    assert main(["study", "flash", "--jobs", "2", "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "--jobs 2 is invalid for study 'flash'" in err and "heads" in err
    assert not any(tmp_path.iterdir())
    assert {n for n, c in STUDIES.items() if c.parallel} >= {"heads", "ln-vs-bn"}
    assert not STUDIES["flash"].parallel and not STUDIES["long-sequences"].parallel


def test_list_and_help_name_jobs(capsys):
    with pytest.raises(SystemExit):
        main(["study", "--help"])
    assert "--jobs" in capsys.readouterr().out
    assert main(["study", "--list"]) == 0
    blocks = dict(re.findall(r"^(\S+)  \((.*?)(?=^\S|\Z)", capsys.readouterr().out, re.M | re.S))
    assert set(blocks) == set(STUDIES)
    for name, cls in STUDIES.items():
        assert ("--jobs N" in blocks[name]) == cls.parallel, name
