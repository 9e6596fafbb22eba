"""A data set file that fails to decode or parse is one error naming the file and the line
(issue 21): CoNLL-U, the sentiment ratings file, SWORD modules, and errors raised inside
DataLoader workers."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tfam.data.sources import sentiment, sword, treebank
from tfam.data.sources.lines import decode_lines, read_lines


def test_decode_lines_names_line_and_column(tmp_path: Path) -> None:
    assert decode_lines(b"\xef\xbb\xbfa\r\nb\n\nc\n", "x") == ["a", "b", "", "c"]
    assert decode_lines(b"a\x0bb\nc", "x") == ["a\x0bb", "c"]  # only \n ends a line
    path = tmp_path / "f.txt"
    path.write_bytes(b"ok\nalso ok\ncaf\xe9 au lait\n")
    with pytest.raises(ValueError) as info:
        read_lines(path)
    assert str(info.value) == (
        f"{path}:3: byte 0xe9 at column 4 is not UTF-8; save the file as UTF-8"
    )


def test_conllu_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "x.conllu"
    good = "1\tBu\tbu\tDET\t_\t_\t0\troot\t_\t_\n"
    path.write_bytes(
        ("# sent_id = 1\n" + good + "\n").encode() + b"1\tk\xf6y\t_\tNOUN" + b"\t_" * 6
    )
    with pytest.raises(ValueError, match=rf"^{path}:4: byte 0xf6 at column 4 is not UTF-8"):
        treebank.read_conllu(path)


def test_conllu_id_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    path = tmp_path / "x.conllu"
    path.write_text("# c\n1\tBu\tbu\tDET" + "\t_" * 6 + "\nx\tev\tev\tNOUN" + "\t_" * 6 + "\n")
    with pytest.raises(ValueError, match=rf"^{path}:3 has ID 'x'; a CoNLL-U word line"):
        treebank.read_conllu(path)


def test_conllu_sentences_say_where_they_start(tmp_path: Path) -> None:
    path = tmp_path / "x.conllu"
    word = "1\tBu\tbu\tDET" + "\t_" * 6 + "\n"
    path.write_text("# sent_id = a\n" + word + "\n\n# sent_id = b\n" + word)
    first, second = treebank.read_conllu(path)
    assert (first.source, second.source) == (f"{path}:2", f"{path}:6")
    assert first == treebank.ConlluSentence("a", ("Bu",), ("DET",))  # source not compared


def sdist_with(ratings: bytes, path: Path) -> Path:
    """A vadersentiment-shaped source archive whose ratings file holds ``ratings``."""

    def tar_of(name: str, data: bytes) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
        return buffer.getvalue()

    inner = tar_of(sentiment._RATINGS_FILE, ratings)
    path.write_bytes(tar_of(sentiment._INNER_ARCHIVE, inner))
    return path


@pytest.mark.parametrize(
    "ratings, message",
    [
        (b"1\t2.5\tfine\n2\t-1.0\tbad \xff film\n", ":2: byte 0xff at column 12 is not UTF-8"),
        (b"1\t2.5\tfine\ntwo\t-1.0\tbad\n", " line 2: id 'two' and mean rating '-1.0' are"),
        (b"1\t2.5\tfine\n\n3\tx\tbad\n", " line 3: id '3' and mean rating 'x' are invalid"),
        (b"1\t2.5\n", " line 1 has 2 tab-separated fields"),
    ],
)
def test_sentiment_ratings_errors_name_the_file_and_line(
    ratings: bytes, message: str, tmp_path: Path
) -> None:
    path = sdist_with(b"1\t2.5\tfine\n", tmp_path / "vader.tar.gz")
    assert sentiment.read_rated_sentences(path)[0].text == "fine"  # the archive's layout is right
    path = sdist_with(ratings, path)
    with pytest.raises(ValueError) as info:
        sentiment.read_rated_sentences(path)
    text = str(info.value)
    assert text.startswith(f"{path}:{sentiment._RATINGS_FILE}") and "\n" not in text
    assert message in text, text


def test_a_sword_module_with_broken_data_files_is_named(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("pysword")
    (tmp_path / "mods.d").mkdir()
    data = tmp_path / "modules" / "texts" / "ztext" / "broken"
    data.mkdir(parents=True)
    (tmp_path / "mods.d" / "broken.conf").write_text(
        "[Broken]\nDataPath=./modules/texts/ztext/broken/\nModDrv=zText\nBlockType=BOOK\n"
        "CompressType=ZIP\nSourceType=OSIS\nEncoding=UTF-8\nVersification=KJV\n"
    )
    (data / "ot.bzs").write_bytes(b"12")  # the other data files are missing
    monkeypatch.setenv("SWORD_PATH", str(tmp_path))
    monkeypatch.setattr(sword, "sword_paths", lambda: [tmp_path])
    sword._open_bible.cache_clear()
    try:
        with pytest.raises(
            ValueError, match=rf"^SWORD module 'Broken' in {tmp_path} cannot be read \(OSError"
        ) as e:
            list(sword.read_verses("Broken", books=["Gen"]))
    finally:
        sword._open_bible.cache_clear()
    assert "\n" not in str(e.value)


def test_an_error_in_a_dataloader_worker_is_its_own_one_line() -> None:
    """Raised in a DataLoader worker, an error comes back with the worker's traceback in its
    message; the command line prints the error itself, naming the file."""
    from torch.utils.data import DataLoader, Dataset

    from tfam.cli import _one_line

    class Broken(Dataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int):
            raise ValueError(f"cannot read '/data/{i}.png' as an image (truncated)")

    with pytest.raises(ValueError) as info:
        next(iter(DataLoader(Broken(), num_workers=1)))
    assert "DataLoader worker" in str(info.value)  # torch's wrapping, which _one_line unwraps
    assert _one_line(info.value) == "cannot read '/data/0.png' as an image (truncated)"
