"""Text data: the SWORD reader, the held-out books, tokenizers, seq2seq datasets, the catalog."""

from __future__ import annotations

import unicodedata
import warnings
from pathlib import Path

import pytest
import torch

from tfam.data import TASK_FACTS, get_dataset, load_dataset
from tfam.data.sources import sword
from tfam.data.sources.seq2seq import (
    QUICK_EVAL_SIZE,
    TEST_BOOKS,
    VAL_BOOKS,
    Seq2SeqDataset,
    book_split,
    kjv_rv_pairs,
    kjv_rv_tokenizer,
    load_kjv_rv,
    load_symbol_task,
    symbol_pairs,
)
from tfam.data.text.dataset import TEXT_SPLITS
from tfam.data.text.tokenizer import (
    TOKENIZER_FILE,
    BPETokenizer,
    CharTokenizer,
    load_tokenizer,
)

KJV, RV = "engKJV2006eb", "spaRV1909eb"


needs_sword = pytest.mark.requires_data("kjv-rv")  # skipped with the reason when absent

# Verses written out here so the tokenizer tests need no Debian package.
ENGLISH = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "And God said, Let there be light: and there was light.",
    "Jesus wept.",
    "For God so loved the world, that he gave his only begotten Son.",
]
SPANISH = [
    "EN el principio crió Dios los cielos y la tierra.",
    "Y la tierra estaba desordenada y vacía, y las tinieblas estaban sobre la haz del abismo.",
    "Y dijo Dios: Sea la luz: y fué la luz.",
    "Y lloró Jesús.",
    "Porque de tal manera amó Dios al mundo, que ha dado á su Hijo unigénito.",
    "¿Quién es éste? ¡Señor, Señor! Aquí está el niño Jehová.",
]


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.train(ENGLISH * 3 + SPANISH * 3, vocab_size=300)


# --- SWORD ------------------------------------------------------------------------------------


@needs_sword
def test_sword_known_verses_exact() -> None:
    en = dict(sword.read_verses(KJV, books=["Gen", "John"]))
    es = dict(sword.read_verses(RV, books=["Gen", "John"]))
    gen11 = sword.VerseRef("Gen", 1, 1)
    assert en[gen11] == "In the beginning God created the heaven and the earth."
    assert es[gen11] == "EN el principio crió Dios los cielos y la tierra."
    john = sword.VerseRef("John", 3, 16)
    assert en[john] == (
        "For God so loved the world, that he gave his only begotten Son, that whosoever "
        "believeth in him should not perish, but have everlasting life."
    )
    assert es[john] == (
        "Porque de tal manera amó Dios al mundo, que ha dado á su Hijo unigénito, para que todo "
        "aquel que en él cree, no se pierda, mas tenga vida eterna."
    )
    assert en[sword.VerseRef("John", 11, 35)] == "Jesus wept."


@needs_sword
def test_sword_markup_stripped() -> None:
    verses = dict(sword.read_verses(KJV, books=["Gen", "Exod"]))
    # The module has a pilcrow before Gen 1:6 and a USFM "\nd" marker in Exod 6:3.
    assert verses[sword.VerseRef("Gen", 1, 6)].startswith("And God said, Let there be")
    assert "by my name JEHOVAH was I not known" in verses[sword.VerseRef("Exod", 6, 3)]
    for text in verses.values():
        assert text == text.strip() and "  " not in text
        assert not set(text) & set("<>&\\{}¶\n\t")
        assert unicodedata.is_normalized("NFC", text)


@needs_sword
def test_sword_canonical_order_and_alignment() -> None:
    en = list(sword.read_verses(KJV))
    refs = [r for r, _ in en]
    assert len(refs) == 31102 and len(set(refs)) == len(refs)  # the KJV versification
    assert refs[:2] == [sword.VerseRef("Gen", 1, 1), sword.VerseRef("Gen", 1, 2)]
    assert refs[-1] == sword.VerseRef("Rev", 22, 21)
    order = {b: i for i, b in enumerate(sword.book_names(KJV))}
    assert [order[r.book] for r in refs] == sorted(order[r.book] for r in refs)

    pairs = sword.parallel_verses(KJV, RV)
    es = dict(sword.read_verses(RV))
    missing = {r for r, t in es.items() if not t}
    assert sword.VerseRef("Num", 12, 16) in missing  # empty in the Spanish module
    assert {r for r, _, _ in pairs} == {r for r, t in en if t} - missing
    assert [r for r, _, _ in pairs] == [r for r in refs if r not in missing]
    by_ref = {r: (a, b) for r, a, b in pairs}
    assert by_ref[sword.VerseRef("John", 11, 35)] == ("Jesus wept.", "Y lloró Jesús.")
    assert all(a and b for _, a, b in pairs)


def test_sword_missing_module_names_package(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(sword, "sword_paths", lambda: [tmp_path])
    with pytest.raises(FileNotFoundError, match="apt-get install sword-text-sparv"):
        sword.find_module(RV)
    with pytest.raises(FileNotFoundError, match="'nosuchBible' not found"):
        sword.find_module("nosuchBible")


def test_sword_path_env_is_searched(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    (tmp_path / "mods.d").mkdir()
    (tmp_path / "mods.d" / "mine.conf").write_text("[MyBible]\nModDrv=zText\n")
    monkeypatch.setenv("SWORD_PATH", str(tmp_path))
    assert sword.sword_paths()[-1] == tmp_path
    assert sword.find_module("mybible") == (tmp_path, "MyBible")


def test_clean_text() -> None:
    raw = (
        "¶ the \\nd LORD\\nd*  is &amp;\n<w lemma='x'>good</w><note n=\"a\">not <hi>this</hi>"
        "</note> LORD<w>’s</w><l type=\"x-br\"/>crio\u0301 <title type='x'/>"
    )
    assert sword.clean_text(raw) == "the LORD is & good LORD’s crió"


# --- the held-out split -----------------------------------------------------------------------


def test_held_out_books_are_disjoint() -> None:
    assert not set(VAL_BOOKS) & set(TEST_BOOKS)
    assert [book_split(b) for b in VAL_BOOKS] == ["val"] * len(VAL_BOOKS)
    assert [book_split(b) for b in TEST_BOOKS] == ["test"] * len(TEST_BOOKS)
    assert book_split("Gen") == "train"


@needs_sword
def test_split_holds_whole_books() -> None:
    splits = {s: kjv_rv_pairs(s) for s in TEXT_SPLITS}
    books = {s: {r.book for r, _, _ in v} for s, v in splits.items()}
    assert books["val"] == set(VAL_BOOKS) and books["test"] == set(TEST_BOOKS)
    assert not books["train"] & (books["val"] | books["test"])
    everything = sword.parallel_verses(KJV, RV)
    assert sum(len(v) for v in splits.values()) == len(everything)
    # Every verse of a held-out book is in its split, none elsewhere.
    for split in ("val", "test"):
        assert splits[split] == [v for v in everything if v[0].book in books[split]]
    assert (len(splits["train"]), len(splits["val"]), len(splits["test"])) == (27565, 503, 3016)
    assert get_dataset("kjv-rv").info.train_size == len(splits["train"])
    assert get_dataset("kjv-rv").info.test_size == len(splits["test"])


# --- tokenizers -------------------------------------------------------------------------------


def test_bpe_round_trips_english_and_spanish(bpe: BPETokenizer) -> None:
    for text in ENGLISH + SPANISH:
        ids = bpe.encode(text)
        assert ids and all(4 <= i < bpe.vocab_size for i in ids)
        assert bpe.decode(ids) == text
    # Decomposed accents (NFD) encode as the composed ones.
    nfd = unicodedata.normalize("NFD", SPANISH[0])
    assert nfd != SPANISH[0] and bpe.encode(nfd) == bpe.encode(SPANISH[0])


def test_bpe_specials_and_edge_cases(bpe: BPETokenizer) -> None:
    assert (bpe.pad_id, bpe.bos_id, bpe.eos_id, bpe.unk_id) == (0, 1, 2, 3)
    assert [bpe.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert bpe.encode("") == [] and bpe.encode("  \n\t ") == []
    ids = bpe.encode("Jesus wept.")
    assert bpe.decode([1, *ids, 2, 0, 0]) == "Jesus wept."
    assert bpe.encode("Jesus   wept.\n") == ids


def test_bpe_unseen_script_gives_unk(bpe: BPETokenizer) -> None:
    for text in ("你好世界", "Ωμέγα", "שלום", "🙂"):
        ids = bpe.encode(text)
        assert bpe.unk_id in ids and all(0 <= i < bpe.vocab_size for i in ids)
        assert bpe.decode(ids) == ""
    mixed = bpe.encode("Jesus 你好 wept.")
    assert bpe.unk_id in mixed and bpe.decode(mixed) == "Jesus wept."


def test_bpe_is_deterministic_and_saves(bpe: BPETokenizer, tmp_path) -> None:
    again = BPETokenizer.train(ENGLISH * 3 + SPANISH * 3, vocab_size=300)
    assert again.to_json() == bpe.to_json()
    assert bpe.vocab_size <= 300
    path = bpe.save(tmp_path / "run")
    assert path == tmp_path / "run" / TOKENIZER_FILE
    loaded = BPETokenizer.load(tmp_path / "run")
    assert isinstance(loaded, BPETokenizer) and loaded.vocab_size == bpe.vocab_size
    assert loaded.encode(SPANISH[4]) == bpe.encode(SPANISH[4])


def test_tokenizer_load_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json in .*empty.*save\(\)"):
        BPETokenizer.load(tmp_path / "empty")
    (tmp_path / TOKENIZER_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="not a readable tokenizer file"):
        load_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="vocab_size=4 is invalid"):
        BPETokenizer.train(ENGLISH, vocab_size=4)


def test_char_tokenizer(tmp_path) -> None:
    tok = CharTokenizer("abc", spaced=True)
    assert tok.vocab_size == 7 and (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.encode("a  c b") == [4, 6, 5]
    assert tok.decode([1, 4, 6, 5, 2, 0]) == "a c b"
    assert tok.encode("a z") == [4, 3] and tok.encode("   ") == []
    tok.save(tmp_path)
    loaded = BPETokenizer.load(tmp_path)  # whichever kind the directory holds
    assert isinstance(loaded, CharTokenizer) and loaded.encode("c a") == [6, 4]
    plain = CharTokenizer.train(["niño", "nino"])
    assert plain.symbols == ("i", "n", "o", "ñ")
    assert plain.decode(plain.encode("niño")) == "niño"
    assert plain.encode("nin\u0303o") == plain.encode("niño")  # NFC
    with pytest.raises(ValueError, match="single characters"):
        CharTokenizer(["ab"])


# --- datasets ---------------------------------------------------------------------------------


def test_seq2seq_items_and_specials(bpe: BPETokenizer) -> None:
    pairs = list(zip(ENGLISH, SPANISH))
    ds = Seq2SeqDataset(pairs, bpe, name="tiny")
    assert len(ds) == len(pairs) and ds.pairs == pairs and ds.tokenizer is bpe
    assert (ds.vocab_size, ds.pad_token_id, ds.bos_token_id, ds.eos_token_id) == (
        bpe.vocab_size,
        0,
        1,
        2,
    )
    for i, (en, es) in enumerate(pairs):
        src, tgt = ds[i]
        assert src.dtype == tgt.dtype == torch.long and src.dim() == tgt.dim() == 1
        assert src.tolist() == [*bpe.encode(en), 2]
        assert tgt.tolist() == [1, *bpe.encode(es), 2]
        assert ds.lengths[i] == max(len(src), len(tgt))
        assert 0 not in src.tolist() + tgt.tolist()


def test_seq2seq_max_len_drops_or_truncates(bpe: BPETokenizer) -> None:
    pairs = list(zip(ENGLISH, SPANISH))
    full = Seq2SeqDataset(pairs, bpe)
    limit = sorted(full.lengths)[2]
    too_long = sum(n > limit for n in full.lengths)
    with pytest.warns(UserWarning, match=f"{too_long} of 5 examples dropped.*max_len={limit}"):
        short = full.with_max_len(limit)
    assert len(short) == 5 - too_long == 5 - short.dropped
    assert max(short.lengths) <= limit
    assert short.pairs == [p for p, n in zip(pairs, full.lengths) if n <= limit]
    with pytest.warns(UserWarning, match="truncated"):
        cut = Seq2SeqDataset(pairs, bpe, max_len=limit, truncate=True)
    assert len(cut) == 5 and cut.truncated == too_long and max(cut.lengths) <= limit
    for src, tgt in (cut[i] for i in range(5)):
        assert src[-1] == 2 and tgt[0] == 1 and tgt[-1] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Seq2SeqDataset(pairs, bpe, max_len=max(full.lengths))  # nothing too long: no warning
    with pytest.raises(ValueError, match="max_len=2 is invalid"):
        Seq2SeqDataset(pairs, bpe, max_len=2)


def test_subset_is_fixed_and_spread(bpe: BPETokenizer) -> None:
    pairs = [(f"a{i}", f"b{i}") for i in range(100)]
    ds = Seq2SeqDataset(pairs, CharTokenizer.train([a + b for a, b in pairs]))
    sub = ds.subset(10)
    assert sub.pairs == [pairs[i] for i in range(0, 100, 10)]
    assert sub.subset(10) is sub and len(ds) == 100  # the original is untouched
    assert torch.equal(sub[3][0], ds[30][0]) and sub.lengths == ds.lengths[::10]


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_symbol_tasks(task: str) -> None:
    train = load_symbol_task(task, "train")
    test = load_dataset(task, "test")
    assert (len(train), len(test)) == (10000, 500) and train.vocab_size == 20
    assert load_symbol_task(task, "test").pairs == test.pairs  # fixed seeds
    assert train.pairs[:50] != test.pairs[:50]  # a different seed per split
    for (src_text, tgt_text), (src, tgt) in zip(test.pairs[:100], (test[i] for i in range(100))):
        seq = src_text.split()
        assert 3 <= len(seq) <= 12
        assert tgt_text.split() == (seq if task == "copy" else seq[::-1])
        assert src[-1] == 2 and tgt[0] == 1 and tgt[-1] == 2
        body = src[:-1].tolist()
        assert tgt[1:-1].tolist() == (body if task == "copy" else body[::-1])
        assert test.tokenizer.decode(tgt.tolist()) == tgt_text
    lengths = {len(p[0].split()) for p in train.pairs}
    assert lengths == set(range(3, 13))


def test_symbol_pairs_arguments() -> None:
    assert symbol_pairs("copy", "val", size=3, min_len=2, max_len=2) != symbol_pairs(
        "copy", "val", size=3, min_len=2, max_len=2, seed=1
    )
    with pytest.raises(ValueError, match="task='sort' is invalid"):
        symbol_pairs("sort", "train")
    with pytest.raises(ValueError, match="unknown split 'fit'"):
        symbol_pairs("copy", "fit")


# --- the catalog ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["copy", "reverse", "kjv-rv"])
def test_catalog_entries(name: str) -> None:
    entry = get_dataset(name)
    assert entry.task == "seq2seq"
    assert TASK_FACTS["seq2seq"] == ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id")
    assert entry.splits == TEXT_SPLITS and entry.train_split == "train"
    assert (entry.val_split, entry.test_split) == ("val", "test")
    assert entry.recipe.preset == "transformer_tiny"
    if name != "kjv-rv":  # kjv-rv's facts: test_kjv_rv_dataset_and_cached_tokenizer
        ds = entry.load("val")
        for fact in TASK_FACTS["seq2seq"]:
            assert getattr(ds, fact) == getattr(entry.info, fact)


@needs_sword
def test_kjv_rv_dataset_and_cached_tokenizer(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TFAM_CACHE", str(tmp_path))
    tok = kjv_rv_tokenizer()
    saved = list((tmp_path / "tokenizers").glob(f"kjv-rv-bpe8000-*/{TOKENIZER_FILE}"))
    assert len(saved) == 1 and tok.vocab_size == 8000
    mtime = saved[0].stat().st_mtime_ns
    val = load_dataset("kjv-rv", "val")  # loads the cached tokenizer: not rewritten
    assert saved[0].stat().st_mtime_ns == mtime
    assert val.tokenizer.to_json() == tok.to_json()
    entry = get_dataset("kjv-rv")
    for fact in TASK_FACTS["seq2seq"]:
        assert getattr(val, fact) == getattr(entry.info, fact)
    assert len(val) == 503 and {r.book for r in val.refs} == set(VAL_BOOKS)
    for i in range(0, len(val), 50):
        (en, es), (src, tgt) = val.pairs[i], val[i]
        assert tok.decode(src.tolist()) == en and tok.decode(tgt.tolist()) == es
        assert src[-1] == 2 and tgt[0] == 1 and tgt[-1] == 2
    # Held-out text never seen by the tokenizer still round-trips (Latin script, known chars).
    assert val.tokenizer.decode(val.tokenizer.encode("Y lloró Jesús.")) == "Y lloró Jesús."
    quick = load_kjv_rv("val").subset(100)
    assert len(quick) == 100 and len({r.book for r in quick.refs}) == len(VAL_BOOKS)
    assert QUICK_EVAL_SIZE <= 3016


def test_tokenizer_file_is_json(bpe: BPETokenizer, tmp_path: Path) -> None:
    import json

    data = json.loads(bpe.save(tmp_path).read_text(encoding="utf-8"))
    assert data["model"]["type"] == "BPE" and data["model"]["unk_token"] == "<unk>"
