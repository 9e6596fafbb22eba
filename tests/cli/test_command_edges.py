"""Rough edges of the commands other than train (issue 21): each bad input is one line naming
the option, file or command, exit 2, never a traceback."""

from __future__ import annotations

import io
import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch

import tfam
from tfam.cli.common import read_texts
from tfam.explain import explain

pytestmark = pytest.mark.usefixtures("one_thread")

# --- explain --seq-len ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "small"),
    [
        ("gpt_char_small", dict(max_positions=48)),
        ("bert", dict(max_positions=48, depth=2)),
        ("transformer", dict(max_positions=48, depth=1, decoder_depth=1)),
    ],
)
def test_explain_at_a_sequence_length_is_the_model_of_that_context(name: str, small: dict):
    """The FLOPs at --seq-len 48 are those of the same model whose context is 48 (a learned
    position table's rows are parameters, not FLOPs)."""
    overrides = {k: v for k, v in small.items() if k != "max_positions"}
    at = explain(name, seq_len=48, **overrides)
    short = explain(name, **small)
    assert at.total_flops == short.total_flops
    assert at.total_flops < explain(name, **overrides).total_flops
    assert 48 in at.symbols.values()
    assert "48 tokens (of max_positions = " in at.to_text()


def test_explain_seq_len_on_the_command_line(cli) -> None:
    code, out, err = cli(["explain", "gpt_char_small", "--seq-len", "64", "--json"])
    assert code == 0, err
    assert '"L": 64' in out


def test_explain_past_the_context_without_a_table(cli) -> None:
    """Only a learned table bounds the length: a RoPE GPT is explained at 4x its context."""
    argv = ["explain", "gpt_char_small", "--set", "position=rope", "--seq-len", "512", "--json"]
    code, out, err = cli(argv)
    assert code == 0, err
    assert '"L": 512' in out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["gpt_char_small", "--seq-len", "129"],
            "--seq-len 129 is invalid: the sequence of 129 tokens is longer than max_positions=128",
        ),
        (["bert", "--seq-len", "0"], "--seq-len 0 is invalid"),
        (["vit_digits", "--seq-len", "16"], "--seq-len 16 is invalid: the 'vit' family reads"),
    ],
)
def test_explain_bad_seq_len_is_one_line(cli, one_line, argv, named) -> None:
    code, out, err = cli(["explain", *argv])
    assert code == 2 and out == ""
    assert named in one_line(err)


# --- text that is not UTF-8 -------------------------------------------------------------------


def _stdin(monkeypatch, data: bytes) -> None:
    """stdin as Python opens it under C.UTF-8: bad bytes kept as lone surrogates."""
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdin", stream)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A tiny random BERT saved as a run directory (no tokenizer: stdin is read first)."""
    path = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    tfam.create_model(
        "bert", dim=16, depth=1, heads=2, vocab_size=40, max_positions=16
    ).save_pretrained(path)
    return path


@pytest.mark.parametrize("command", ["translate", "embed", "predict"])
def test_stdin_that_is_not_utf8_is_one_line(cli, one_line, monkeypatch, bert_dir, command):
    _stdin(monkeypatch, b"a fine film\ncaf\xe9 au lait\n")
    code, out, err = cli([command, bert_dir, "-"])
    assert code == 2 and out == ""
    assert "stdin line 2 is not UTF-8 text: byte 0xe9 at byte 4" in one_line(err)


def test_arguments_that_are_not_utf8_are_one_line(cli, one_line, tmp_path) -> None:
    code, _, err = cli(["embed", tmp_path, "good", "caf\udce9"])
    assert code == 2
    assert "TEXT 2 is not UTF-8 text: byte 0xe9 at character 4" in one_line(err)


def test_stdin_utf8_with_a_byte_order_mark_reads() -> None:
    data = "\ufeffcafé\r\nthé\n".encode()
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
    assert read_texts([], "embed", stdin=stream) == (
        ["café", "thé"],
        ["stdin line 1", "stdin line 2"],
    )


# --- eval: an image run on text data -----------------------------------------------------------


@pytest.fixture(scope="module")
def image_run(tmp_path_factory) -> Path:
    """A tiny random ViT on 8x8 grey images of 3 classes, with its preprocess.json."""
    path = tmp_path_factory.mktemp("vit")
    torch.manual_seed(0)
    tfam.create_model(
        "vit", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=16, depth=1, heads=2
    ).save_pretrained(path)
    pre = dict(dataset="digits", image_size=[8, 8], in_channels=1, mean=[0.5], std=[0.25])
    pre.update(classes=["a", "b", "c"], pixel_scale=255.0)
    (path / "preprocess.json").write_text(json.dumps(pre))
    return path


@pytest.mark.parametrize("data", ["copy", "sentiment", "kjv"])
def test_eval_image_run_on_text_data_is_one_line(cli, one_line, image_run: Path, data) -> None:
    code, out, err = cli(["eval", image_run, "--data", data])
    assert code == 2 and out == ""
    line = one_line(err)
    assert f"--data {data} is a " in line
    assert "is an image classifier (ViT)" in line and "digits" in line


# --- convert: weights that are not plain, warnings as tfam lines ---------------------------------


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory) -> Path:
    """A tiny Hugging Face GPT-2 directory (config.json + model.safetensors)."""
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("hf_gpt2")
    config = transformers.GPT2Config(
        n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(path)
    return path


def _bin_dir(src: Path, dest: Path, kind: str) -> Path:
    """src's config with a pytorch_model.bin of one kind in place of its safetensors."""
    import zipfile

    from safetensors.torch import load_file

    dest.mkdir()
    shutil.copy(src / "config.json", dest / "config.json")
    weights, path = load_file(src / "model.safetensors"), dest / "pytorch_model.bin"
    if kind == "state dict":
        torch.save(weights, path)
    elif kind == "pickled model":
        torch.save(torch.nn.Linear(2, 2), path)
    elif kind == "foreign zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("hello.txt", "hi")
    elif kind == "junk":
        path.write_bytes(b"not a torch file")
    elif kind == "tensor":
        torch.save(torch.zeros(3), path)
    return dest


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("pickled model", "it is a pickled Python object (torch.nn.modules.linear.Linear)"),
        ("foreign zip", "torch.load cannot read it (file in archive is not in a subdirectory"),
        ("junk", "it is not a file torch.save wrote ("),
        ("tensor", "it holds a Tensor, not a dict of tensors"),
    ],
)
def test_convert_bin_that_is_not_plain_weights_is_one_line(
    cli, one_line, hf_gpt2: Path, tmp_path: Path, kind: str, reason: str
) -> None:
    src = _bin_dir(hf_gpt2, tmp_path / "src", kind)
    code, out, err = cli(["convert", "hf-to-tfam", src, tmp_path / "out"])
    assert code == 2 and out == ""
    line = one_line(err)
    assert f"{src / 'pytorch_model.bin'} is not plain weights: {reason}" in line
    assert not (tmp_path / "out").exists()


def test_convert_plain_bin_weights_still_convert(cli, hf_gpt2: Path, tmp_path: Path) -> None:
    src = _bin_dir(hf_gpt2, tmp_path / "src", "state dict")
    code, out, err = cli(["convert", "hf-to-tfam", src, tmp_path / "out"])
    assert code == 0, err
    assert "(ok, atol" in out


def test_cli_shows_python_warnings_as_tfam_lines(cli, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = tfam.create_model(
        "gpt", dim=16, depth=1, heads=2, vocab_size=50, max_positions=32, drop_path=0.1
    )
    model.save_pretrained(tmp_path / "gpt")
    before = warnings.showwarning
    code, out, err = cli(["convert", "tfam-to-hf", tmp_path / "gpt", tmp_path / "hf"])
    assert code == 0, err
    assert err.splitlines() == [
        "tfam: warning: drop_path=0.1 is dropped: GPT-2 has no stochastic depth (eval outputs "
        "are unchanged; training the HF model will differ)"
    ]
    assert warnings.showwarning is before  # restored when main returns


# --- viz curves on a bad file, viz pos on a GPT ---------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff\xfeepoch\n", "is not a metrics CSV: line 1 is not UTF-8 text (byte 0xff)"),
        (b"epoch,train_loss\n1,0.5\n2,\xe9\n", "line 3 is not UTF-8 text (byte 0xe9)"),
        (b'epoch,train_loss\n1,"' + b"x" * 200_000 + b'"\n', "line 2: field larger than"),
        (b"", "is empty: expected a header row"),
    ],
)
def test_viz_curves_on_a_bad_file_names_it(cli, one_line, tmp_path: Path, content, said) -> None:
    (tmp_path / "metrics.csv").write_bytes(content)
    code, out, err = cli(["viz", "curves", tmp_path])
    assert code == 2 and out == ""
    line = one_line(err)
    assert str(tmp_path / "metrics.csv") in line and said in line


@pytest.mark.parametrize("position", ["learned", "sinusoidal"])
def test_viz_pos_draws_a_gpt_s_positions(cli, tmp_path: Path, position: str) -> None:
    from tfam.viz import plot_position_similarity, sequence_position_similarity

    torch.manual_seed(0)
    model = tfam.create_model(
        "gpt", dim=16, depth=1, heads=2, vocab_size=20, max_positions=24, position=position
    )
    model.save_pretrained(tmp_path / "gpt")
    code, out, err = cli(["viz", "pos", tmp_path / "gpt", "--out", tmp_path / "pos.png"])
    assert code == 0, err
    assert out == f"position embedding similarity: {tmp_path / 'pos.png'}\n"
    assert (tmp_path / "pos.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sim = sequence_position_similarity(model)
    table = model.pos_embed if position == "learned" else model.position.table
    unit = torch.nn.functional.normalize(table.detach(), dim=-1)
    torch.testing.assert_close(sim, unit @ unit.T)
    fig = plot_position_similarity(model)
    assert "(24 positions)" in fig._suptitle.get_text()


@pytest.mark.parametrize(
    ("family", "overrides", "said"),
    [
        ("gpt", dict(position="rope"), "position='rope': the model has no position embeddings"),
        ("bert", {}, "Bert has no position table of its own to draw: viz pos draws a ViT's"),
    ],
)
def test_viz_pos_without_a_table_is_one_line(cli, one_line, tmp_path, family, overrides, said):
    tfam.create_model(
        family, dim=16, depth=1, heads=2, vocab_size=20, max_positions=24, **overrides
    ).save_pretrained(tmp_path / "run")
    code, out, err = cli(["viz", "pos", tmp_path / "run"])
    assert code == 2 and out == ""
    assert said in one_line(err)
