"""Every registered study runs at --profile tiny and writes its report, results and figures;
`tfam study --list`; bad names in one line; a rerun skips what results.json holds."""

import json
import re

import pytest

from tfam.cli import main
from tfam.studies import PROFILES, STUDIES, get_study

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_every_study_runs_tiny_and_writes_its_files(name, tmp_path, capsys):
    out = tmp_path / name
    assert main(["study", name, "--profile", "tiny", "--seeds", "2", "--out", str(out),
                 "--quiet"]) == 0  # fmt: skip
    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    assert results["study"] == name and results["profile"] == "tiny"
    assert results["seeds"] == [0, 1] and results["records"]
    assert results["conclusions"] and all(c in report for c in results["conclusions"])
    for heading in ("**Claim.**", "## Setup", "## Conclusion"):
        assert heading in report
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert figures, "a report shows at least one figure"
    for fig in figures:
        assert (out / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


def test_every_study_declares_what_it_answers():
    for name, cls in STUDIES.items():
        assert set(cls.profiles) == set(PROFILES), name
        assert cls.questions and re.search(r"00\d_\*", cls.claim), name
        assert all(p.expected for p in cls.profiles.values()), name


def test_a_rerun_skips_what_results_json_holds(tmp_path):
    study = get_study("flash")
    first = study.run("tiny", seeds=1, out_dir=tmp_path, progress=None)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    key = next(k for k in data["records"] if k.startswith("forward/"))
    data["records"][key]["ms"] = 12345.0  # a value no run measures: it must stay
    path.write_text(json.dumps(data))
    second = study.run("tiny", seeds=1, out_dir=tmp_path)
    assert second["records"][key]["ms"] == 12345.0
    assert set(second["records"]) == set(first["records"])
    # Another profile in the same folder is refused in one line.
    with pytest.raises(ValueError, match="holds study 'flash' at profile 'tiny'"):
        study.run("quick", seeds=1, out_dir=tmp_path)


def test_list_shows_names_claims_and_times(capsys):
    assert main(["study", "--list"]) == 0
    text = capsys.readouterr().out
    for name, cls in STUDIES.items():
        assert name in text
        assert f"quick {cls.profiles['quick'].expected}" in text


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["study", "nope", "--out", "x"], "study 'nope' is unknown: expected one of "),
        (["study", "flash", "--profile", "huge", "--out", "x"],
         "--profile 'huge' is invalid: expected one of tiny, quick, full"),
        (["study", "flash", "--seeds", "0", "--out", "x"], "--seeds '0' is invalid"),
        (["study", "flash"], "--out DIR is required"),
    ],
)  # fmt: skip
def test_bad_values_are_one_line(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err
    if "unknown" in expected:
        assert all(n in err for n in STUDIES)


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["study", "flash", "--device", "tpu", "--out", "x"],
         "--device 'tpu' is invalid: expected cpu, cuda or cuda:N"),
        (["study", "ln-vs-bn", "--device", "cuda", "--out", "x"],
         "--device 'cuda' is invalid for study 'ln-vs-bn' at profile 'tiny': it runs on the "
         "CPU only (studies with CUDA profiles: flash, long-sequences)"),
    ],
)  # fmt: skip
def test_bad_devices_are_one_line_before_any_work(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err
    assert not (tmp_path / "x").exists()


def test_cuda_settings_replace_the_profiles_and_record_the_device():
    study = get_study("long-sequences")
    cpu = study.settings_for("full")
    cuda = study.settings_for("full", "cuda:1")
    assert "device" not in cpu  # CPU folders written before --device existed still resume
    assert cuda["device"] == "cuda:1" and cuda["listops_lengths"] == [500, 1000]
    assert cuda["text_length"] == 1000 and cuda["image_size"] == 32
    assert {k: v for k, v in cuda.items() if k not in study.profiles["full"].cuda} == {
        **{k: v for k, v in cpu.items() if k not in study.profiles["full"].cuda},
        "device": "cuda:1",
    }
    assert study.settings_for("tiny", "cuda") == {**study.settings_for("tiny"), "device": "cuda"}


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused_in_one_line(capsys, tmp_path):
    assert main(["study", "flash", "--device", "cuda", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--device 'cuda' is invalid here: torch sees no CUDA device" in err


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["flash", "long-sequences"])
def test_cuda_studies_run_tiny_on_the_gpu(name, tmp_path):
    result = get_study(name).run("tiny", seeds=1, out_dir=tmp_path, device="cuda")
    assert result["settings"]["device"] == "cuda"
    report = (tmp_path / "report.md").read_text()
    assert "--device cuda" in report and "cuda" in report.split("## Setup")[1]


def test_list_shows_which_profiles_run_on_cuda(capsys):
    assert main(["study", "--list"]) == 0
    text = capsys.readouterr().out
    block = text.split("long-sequences  (")[1].split("\nno-positions")[0]
    assert "on CUDA (--device cuda): tiny ~seconds; full not measured" in block
    assert "on CUDA" not in text.split("ln-vs-bn  (")[1].split("\nlong-sequences")[0]
