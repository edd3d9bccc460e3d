"""A tokenizer's own settings never change a keyword.

For every tokenizer kind `KeywordSet.from_texts` takes, configured the way tokenizers often are (padding,
truncation, BPE dropout, sampling, reversing, BOS / EOS and special tokens added, a bound ``encode`` passed as
the callable, a tokenizer.json saved with such settings), keyword i equals the tokenizer's own deterministic
single-string encoding of ``texts[i]`` without special tokens, over odd Unicode (combining marks, NFC and NFD,
emoji, right-to-left text, zero-width characters), through the Python API and ``flashtrie build --tokenizer``
(names files with or without a BOM, LF or CRLF), before and after save / load.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import text_tokenizers as tt
from hypothesis import given, settings
from hypothesis import strategies as st

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex, Proposals
from flashtrie.cli import main

FRAGMENTS = ["red", " shoes", "Paris", " ", "東京", "São", "e\u0301", "\u00e9", "Ame\u0301lie", "🌧",
             "👩\u200d👩\u200d👧", "שלום", "مرحبا", "\u200f", "\u200e", "\u200b", "\u200c", "\u200d",
             "\ufeff", "\u0301", "<eos>", "<|endoftext|>", "<unk>", "  new york "]
chars = st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\n\r")
name = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(chars, min_size=1, max_size=3)), min_size=1,
                max_size=4).map("".join)
names = st.lists(name, min_size=1, max_size=8)
EXAMPLES = 8


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, Any]:
    """One tokenizer of each kind, as trained (no settings), and the sentencepiece model file; transformers and
    tiktoken (optional extras) only where installed."""
    tmp = tmp_path_factory.mktemp("tok")
    found = {"bpe": tt.bpe(), "unigram": tt.unigram(), "chars": tt.char_bpe(), "sp": tt.sentencepiece_model(tmp),
             "sp_file": tmp / "sp.model"}
    if importlib.util.find_spec("transformers"):
        found.update(fast=tt.transformers_fast(), slow=tt.transformers_slow(tmp / "sp.model"),
                     python=tt.transformers_python(tmp), fast_unigram=_fast(found, _copy(found["unigram"])))
    if importlib.util.find_spec("tiktoken"):
        found["tiktoken"] = tt.tiktoken_encoding()
    return found


def _needs(clean: dict[str, Any], key: str) -> None:
    if key != "callable" and key not in clean:
        pytest.skip(f"needs the package of the {key!r} tokenizer")


def _copy(tok: Any) -> Any:
    return type(tok).from_str(tok.to_str())


def _padded(tok: Any, **padding: Any) -> Any:
    t = _copy(tok)
    t.enable_padding(**padding)
    return t


def _truncated(tok: Any) -> Any:
    t = _copy(tok)
    t.enable_truncation(max_length=2)
    return t


def tt_bytes(s: str) -> list[int]:
    return list(s.encode("utf-8"))


def _everything_on(tok: Any) -> Any:
    t = _padded(tok, length=9, pad_id=0, pad_token="<eos>")
    t.enable_truncation(max_length=2)
    if hasattr(t.model, "dropout"):
        t.model.dropout = 0.5
    else:
        t.model.alpha, t.model.nbest_size = 0.5, 8
    return t


def _fast(clean: dict[str, Any], backend: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=tt.EOS_TEXT, bos_token=tt.EOS_TEXT,
                                   model_max_length=2)


def _fast_file(clean: dict[str, Any]) -> Any:
    """A transformers tokenizer read from a tokenizer.json saved with padding and truncation on."""
    from transformers import PreTrainedTokenizerFast

    path = clean["sp_file"].parent / "padded-tokenizer.json"
    if not path.exists():
        t = _padded(clean["bpe"], length=9, pad_id=0)
        t.enable_truncation(max_length=2)
        t.save(os.fspath(path))
    return PreTrainedTokenizerFast(tokenizer_file=os.fspath(path))


def _sp(clean: dict[str, Any], **kw: Any) -> Any:
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=os.fspath(clean["sp_file"]), **kw)


SP_ALL = {"enable_sampling": True, "alpha": 0.5, "nbest_size": -1, "reverse": True, "add_bos": True,
          "add_eos": True}

#: name -> (the clean tokenizer's key, its kind for `tt.encode_one`, a maker of the configured tokenizer)
CONFIGS: dict[str, tuple[str, str, Callable[[dict[str, Any]], Any]]] = {
    "bpe": ("bpe", "tokenizers", lambda c: c["bpe"]),
    "bpe-padded-to-length": ("bpe", "tokenizers", lambda c: _padded(c["bpe"], length=9, pad_id=0)),
    "bpe-padded-to-longest": ("bpe", "tokenizers", lambda c: _padded(c["bpe"], pad_id=0)),
    "bpe-truncated": ("bpe", "tokenizers", lambda c: _truncated(c["bpe"])),
    "bpe-all-on": ("bpe", "tokenizers", lambda c: _everything_on(c["bpe"])),
    "bpe-all-on-bound-encode": ("bpe", "tokenizers", lambda c: _everything_on(c["bpe"]).encode),
    "unigram-all-on": ("unigram", "tokenizers", lambda c: _everything_on(c["unigram"])),
    "char-bpe-without-unknown-token": ("chars", "tokenizers", lambda c: _padded(c["chars"], pad_id=0)),
    "transformers-fast-all-on": ("fast", "transformers", lambda c: _fast(c, _everything_on(c["bpe"]))),
    "transformers-fast-unigram-padded": ("fast_unigram", "transformers",
                                         lambda c: _fast(c, _padded(c["unigram"], length=9, pad_id=0))),
    "transformers-fast-from-padded-file": ("fast", "transformers", lambda c: _fast_file(c)),
    "transformers-fast-bound-encode": ("fast", "transformers", lambda c: _fast(c, _copy(c["bpe"])).encode),
    "transformers-fast-bound-call": ("fast", "transformers", lambda c: _fast(c, _copy(c["bpe"])).__call__),
    "transformers-slow": ("slow", "transformers", lambda c: c["slow"]),
    "transformers-slow-bound-encode": ("slow", "transformers", lambda c: c["slow"].encode),
    "transformers-python": ("python", "transformers", lambda c: c["python"]),
    "transformers-python-bound-encode": ("python", "transformers", lambda c: c["python"].encode),
    "tiktoken": ("tiktoken", "tiktoken", lambda c: c["tiktoken"]),
    "tiktoken-bound-encode": ("tiktoken", "tiktoken", lambda c: c["tiktoken"].encode),
    "sentencepiece": ("sp", "sentencepiece", lambda c: c["sp"]),
    "sentencepiece-sampling-reverse-bos-eos": ("sp", "sentencepiece", lambda c: _sp(c, **SP_ALL)),
    "sentencepiece-bound-encode": ("sp", "sentencepiece", lambda c: _sp(c, **SP_ALL).encode),
    "callable": ("callable", "callable", lambda c: tt_bytes),
}
def _own(clean: dict[str, Any], key: str, kind: str, texts: list[str]) -> list[list[int]]:
    tok = tt_bytes if key == "callable" else clean[key]
    return [list(tt.encode_one(kind, tok, t)) for t in texts]


def _unknown_id(clean: dict[str, Any], key: str) -> int | None:
    if key in ("unigram", "fast_unigram"):
        return 0
    if key == "sp":
        return int(clean["sp"].unk_id())
    return clean[key].unk_token_id if key in ("slow", "python") else None


def _loses_characters(clean: dict[str, Any], key: str, texts: list[str], own: list[list[int]]) -> bool:
    """Whether some text's tokens do not spell it: the unknown token, or (a BPE without one) a dropped character
    (its tokens do not spell its pre-tokenized pieces)."""
    if key == "chars":
        tok = clean["chars"]
        return any("".join(map(tok.id_to_token, o)) != "".join(p for p, _ in tok.pre_tokenizer.pre_tokenize_str(t))
                   for t, o in zip(texts, own, strict=True))
    unk = _unknown_id(clean, key)
    return unk is not None and any(unk in o for o in own)


def _state(tok: Any) -> Any:
    """What a caller could see of a tokenizer's settings (its whole serialized form where it has one)."""
    owner = getattr(tok, "__self__", tok)
    backend = getattr(owner, "backend_tokenizer", owner)
    return backend.to_str() if hasattr(backend, "to_str") else None


def _check_index(ix: NarrowLoudsIndex, texts: list[str], own: list[list[int]]) -> None:
    first = {tuple(o): own.index(o) for o in reversed(own)}
    assert [ix.text(i) for i in range(len(texts))] == texts  # keyword id i is texts[i], strings kept exactly
    assert [ix.lookup(o) for o in own] == [first[tuple(o)] for o in own]
    assert [ix.keyword(first[tuple(o)]).tolist() for o in own] == own


@pytest.mark.parametrize("config", sorted(CONFIGS))
@settings(max_examples=EXAMPLES)
@given(texts=names)
def test_from_texts_is_the_tokenizers_own_encoding(clean, tmp_path_factory, config, texts):
    key, kind, make = CONFIGS[config]
    _needs(clean, key)
    own = _own(clean, key, kind, texts)
    texts = [t for t, o in zip(texts, own, strict=True) if o]  # a text with no tokens is refused (tested elsewhere)
    own = [o for o in own if o]
    if not texts:
        return
    tok = make(clean)
    before = _state(tok)
    ks = KeywordSet.from_texts(texts, tok, duplicates="keep", unknown="keep")
    assert ks.to_sequences() == own
    assert _state(tok) == before  # the caller's tokenizer is left as it was
    path = tmp_path_factory.mktemp("ix") / "a.ftrie"
    ix = NarrowLoudsIndex.build(ks)
    ix.save(path)
    for index in (ix, NarrowLoudsIndex.load(path)):
        _check_index(index, texts, own)
    if _loses_characters(clean, key, texts, own):
        with pytest.raises(InputError, match=r"(unknown token|drops without a trace).*unknown='keep'"):
            KeywordSet.from_texts(texts, tok, duplicates="keep")
    else:
        assert KeywordSet.from_texts(texts, tok, duplicates="keep").to_sequences() == own


def _specs(clean: dict[str, Any], tmp: Path) -> dict[str, tuple[str, str, str]]:
    """--tokenizer SPEC files, saved with the settings on: name -> (spec, clean key, kind)."""
    bpe, uni = _everything_on(clean["bpe"]), _everything_on(clean["unigram"])
    bpe.save(os.fspath(tmp / "bpe.json"))
    uni.save(os.fspath(tmp / "unigram.json"))
    found = {"bpe": (os.fspath(tmp / "bpe.json"), "bpe", "tokenizers"),
             "unigram": (os.fspath(tmp / "unigram.json"), "unigram", "tokenizers"),
             "sentencepiece": (os.fspath(clean["sp_file"]), "sp", "sentencepiece")}
    if "fast" in clean:
        _fast(clean, _padded(clean["bpe"], length=9, pad_id=0)).save_pretrained(os.fspath(tmp / "fast"))
        found["fast"] = (os.fspath(tmp / "fast"), "fast", "transformers")
    if "tiktoken" in clean:
        tt.save_tiktoken_ranks(tmp / "tiny.tiktoken")
        found["tiktoken"] = (os.fspath(tmp / "tiny.tiktoken"), "tiktoken", "tiktoken")
    return found


@pytest.fixture(scope="module")
def specs(clean, tmp_path_factory) -> dict[str, tuple[str, str, str]]:
    return _specs(clean, tmp_path_factory.mktemp("specs"))


@pytest.mark.parametrize("spec", ["bpe", "unigram", "fast", "tiktoken", "sentencepiece"])
@settings(max_examples=3)
@given(texts=names, bom=st.booleans(), crlf=st.booleans())
def test_cli_build_is_the_tokenizers_own_encoding(clean, specs, tmp_path_factory, spec, texts, bom, crlf):
    if spec not in specs:
        pytest.skip(f"needs the package of the {spec!r} tokenizer")
    path, key, kind = specs[spec]
    own = _own(clean, key, kind, texts)
    texts = [t for t, o in zip(texts, own, strict=True) if o]
    own = [o for o in own if o]
    if not texts:
        return
    tmp = tmp_path_factory.mktemp("cli")
    end = "\r\n" if crlf else "\n"
    (tmp / "names.txt").write_bytes(("\ufeff" if bom else "").encode() + end.join(texts).encode() + end.encode())
    out = tmp / "names.ftrie"
    assert main(["build", os.fspath(tmp / "names.txt"), "--tokenizer", path, "-o", os.fspath(out), "--quiet",
                 "--duplicates", "keep", "--unknown", "keep"]) == 0
    _check_index(NarrowLoudsIndex.load(out), texts, own)


def test_sampling_transformers_tokenizer_refused_by_name(clean):
    _needs(clean, "slow")
    from transformers import BertGenerationTokenizer

    tok = BertGenerationTokenizer(vocab_file=os.fspath(clean["sp_file"]),
                                  sp_model_kwargs={"enable_sampling": True, "alpha": 0.5, "nbest_size": -1})
    with pytest.raises(InputError, match=r"tokenizer: BertGenerationTokenizer samples .*enable_sampling"):
        KeywordSet.from_texts(["red shoes"], tok)


def test_a_callable_returning_a_tokenizers_result_is_told_to_pass_the_tokenizer(clean):
    _needs(clean, "fast")
    bpe, fast = _padded(clean["bpe"], pad_id=0), clean["fast"]
    with pytest.raises(InputError, match=r"tokenizer\(texts\[0\]\): returned a tokenizers Encoding.*pass the "
                                         r"tokenizers.Tokenizer itself"):
        KeywordSet.from_texts(["red"], lambda s: bpe.encode(s))
    with pytest.raises(InputError, match=r"'input_ids'.*pass the transformers tokenizer itself"):
        KeywordSet.from_texts(["red"], lambda s: fast(s))


def test_unknown_tokens_refused_naming_the_texts_or_kept(clean, tmp_path, capsys):
    uni = clean["unigram"]
    texts = ["red 🌧", "red ☔", "paris", "red 🌂", "new 🗽", "york ⛱"]
    with pytest.raises(InputError, match=r"texts: 5 texts hold the tokenizer's unknown token \(id 0: .*them: "
                                         r"texts\[0\] = 'red 🌧', texts\[1\] = 'red ☔', texts\[3\] = 'red 🌂' "
                                         r"and 2 more; pass unknown='keep'"):
        KeywordSet.from_texts(texts, uni)
    with pytest.raises(InputError, match="has the same tokens as"):  # kept, they collapse: then said so
        KeywordSet.from_texts(texts, uni, unknown="keep")
    kept = KeywordSet.from_texts(texts, uni, unknown="keep", duplicates="keep")
    assert kept.to_sequences() == [uni.encode(t, add_special_tokens=False).ids for t in texts]
    with pytest.raises(InputError, match=r"unknown: expected 'error' or 'keep', got 'warn'"):
        KeywordSet.from_texts(texts, uni, unknown="warn")  # type: ignore[arg-type]
    uni.save(os.fspath(tmp_path / "u.json"))
    (tmp_path / "names.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    build = ["build", os.fspath(tmp_path / "names.txt"), "-o", os.fspath(tmp_path / "n.ftrie"), "--quiet"]
    assert main([*build, "--tokenizer", os.fspath(tmp_path / "u.json")]) != 0
    err = capsys.readouterr().err
    assert "5 texts hold the tokenizer's unknown token" in err and "--unknown keep" in err and "unknown='" not in err
    assert main([*build, "--tokenizer", os.fspath(tmp_path / "u.json"), "--unknown", "keep",
                 "--duplicates", "keep"]) == 0
    assert NarrowLoudsIndex.load(tmp_path / "n.ftrie").texts(list(range(6))) == texts
    assert main([*build, "--unknown", "keep"]) != 0
    assert "--unknown: applies to names tokenized with --tokenizer" in capsys.readouterr().err


def test_characters_a_bpe_drops_refused_naming_the_texts(clean):
    texts = ["red 🌧", "red", "paris ☔", "new york"]
    with pytest.raises(InputError, match=r"texts: 2 texts hold characters the tokenizer's vocabulary lacks "
                                         r"\('☔🌧'\), which its BPE model .* drops without a trace: texts\[0\] = "
                                         r"'red 🌧', texts\[2\] = 'paris ☔'; pass unknown='keep'"):
        KeywordSet.from_texts(texts, clean["chars"])
    with pytest.raises(InputError, match=r"texts\[1\] = 'red' has the same tokens as texts\[0\] = 'red 🌧'"):
        KeywordSet.from_texts(texts, clean["chars"], unknown="keep")
    assert len(KeywordSet.from_texts(texts[2:], clean["chars"], unknown="keep")) == 2


def test_a_bom_never_reaches_a_name(clean, tmp_path, capsys):
    from flashtrie.datasets.io import load_names

    (tmp_path / "names.txt").write_bytes("\ufeffred shoes\r\nparis\r\n".encode())
    assert load_names(tmp_path / "names.txt") == ["red shoes", "paris"]
    (tmp_path / "q.tsv").write_bytes('\ufeffred things\t{"indices": [[1]], "probs": [[-0.5]]}\n'.encode())
    _, query_names = Proposals.from_tsv(tmp_path / "q.tsv")
    assert query_names == ["red things"]
    out = tmp_path / "n.ftrie"
    assert main(["build", os.fspath(tmp_path / "names.txt"), "--tokenizer", os.fspath(clean["sp_file"]), "-o",
                 os.fspath(out), "--quiet"]) == 0
    ix = NarrowLoudsIndex.load(out)
    assert ix.text(0) == "red shoes" and ix.keyword(0).tolist() == clean["sp"].encode("red shoes")
    assert main(["build", os.fspath(tmp_path / "names.txt"), "-o", os.fspath(out), "--quiet"]) != 0
    assert "holds words (line 1: 'red shoes')" in capsys.readouterr().err  # no tokenizer: the advice quotes it
