"""The command line with strings: `build --tokenizer`, `search --show-text`, TSV query names, your own arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest
import text_tokenizers as tt

from flashtrie import KeywordSet, NarrowLoudsIndex
from flashtrie.cli import main


@pytest.fixture
def names_and_tokenizer(tmp_path):
    tok = tt.bpe()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "names.txt").write_text("\n".join(tt.NAMES) + "\n\n", encoding="utf-8")
    return tmp_path, tok


def _tsv(path, rows):
    path.write_text("".join(f"{name}\t{json.dumps({'indices': idx, 'probs': lp})}\n" for name, idx, lp in rows))


def test_build_with_tokenizer_then_search_show_text(names_and_tokenizer, capsys):
    tmp, tok = names_and_tokenizer
    out = tmp / "names.ftrie"
    assert main(["build", str(tmp / "names.txt"), "--tokenizer", str(tmp / "tokenizer.json"), "-o", str(out),
                 "--quiet"]) == 0
    ix = NarrowLoudsIndex.load(out)
    enc = [tok.encode(n, add_special_tokens=False).ids for n in tt.NAMES]
    assert [ix.text(ix.lookup(t)) for t in enc] == tt.NAMES and ix.texts(np.arange(len(enc))) == tt.NAMES
    assert main(["info", str(out)]) == 0
    assert f"strings {len(tt.NAMES)} stored" in capsys.readouterr().out
    red, shoes = enc[0]  # "red shoes": two tokens
    _tsv(tmp / "q.tsv", [("red things", [[red], [shoes]], [[-0.1], [-0.2]]),
                         ("other", [[red], [shoes]], [[-0.5], [-9.0]])])
    res = tmp / "res.npz"
    assert main(["search", "--index", str(out), "--queries", str(tmp / "q.tsv"), "--beam", "4", "--show-text",
                 "--quiet", "-o", str(res)]) == 0
    text = capsys.readouterr().out
    assert "query 0: 2 results for 'red things'" in text and "text 'red'" in text and "text 'red shoes'" in text
    assert "query 1: 2 results for 'other'" in text
    saved = np.load(res)
    assert saved["query_names"].tolist() == ["red things", "other"]
    assert ix.texts(saved["keyword_ids"][:, :2]) == [["red", "red shoes"], ["red", "red shoes"]]


def test_show_text_needs_strings_and_words_need_a_tokenizer(tmp_path, capsys):
    words = tmp_path / "words.txt"
    words.write_text("red shoes\nblue\n")
    assert main(["build", str(words), "-o", str(tmp_path / "w.ftrie")]) == 2
    err = capsys.readouterr().err
    assert "holds words (line 1: 'red shoes'), not token ids" in err and "--tokenizer SPEC" in err
    kw = tmp_path / "kw.txt"
    kw.write_text("1 2\n3\n")
    assert main(["build", str(kw), "-o", str(tmp_path / "k.ftrie"), "--quiet"]) == 0
    _tsv(tmp_path / "q.tsv", [("q", [[1], [2]], [[-0.1], [-0.2]])])
    assert main(["search", "--index", str(tmp_path / "k.ftrie"), "--queries", str(tmp_path / "q.tsv"),
                 "--show-text", "--quiet"]) == 2
    assert "--show-text: needs an index that holds strings" in capsys.readouterr().err
    assert main(["build", str(kw), "--duplicates", "keep", "-o", str(tmp_path / "k.ftrie"), "--quiet"]) == 2


def test_build_tokenizer_errors_name_the_line_or_spec(names_and_tokenizer, capsys):
    tmp, _ = names_and_tokenizer
    spec = str(tmp / "tokenizer.json")
    (tmp / "dup.txt").write_text("red\nblue\nred\n")
    assert main(["build", str(tmp / "dup.txt"), "--tokenizer", spec, "-o", str(tmp / "d.ftrie")]) == 2
    assert "texts[2] = 'red' has the same tokens as texts[0]" in capsys.readouterr().err
    assert main(["build", str(tmp / "dup.txt"), "--tokenizer", spec, "--duplicates", "keep", "-o",
                 str(tmp / "d.ftrie"), "--quiet"]) == 0
    assert NarrowLoudsIndex.load(tmp / "d.ftrie").duplicates == 1
    (tmp / "blank.txt").write_text("red\n\nblue\n")
    assert main(["build", str(tmp / "blank.txt"), "--tokenizer", spec, "-o", str(tmp / "b.ftrie")]) == 2
    assert "line 2: empty line" in capsys.readouterr().err
    (tmp / "latin1.txt").write_bytes("red\nS\xe3o\n".encode("latin-1"))
    assert main(["build", str(tmp / "latin1.txt"), "--tokenizer", spec, "-o", str(tmp / "b.ftrie")]) == 2
    assert "line 2: not UTF-8" in capsys.readouterr().err
    for bad, match in [(tmp / "nope.json", "no such file"), (tmp / "names.txt", "unknown kind of tokenizer file"),
                       (tmp / "blank.txt", "unknown kind")]:
        assert main(["build", str(tmp / "names.txt"), "--tokenizer", str(bad), "-o", str(tmp / "b.ftrie")]) == 2
        assert match in capsys.readouterr().err
    (tmp / "broken.json").write_text("{}")
    assert main(["build", str(tmp / "names.txt"), "--tokenizer", str(tmp / "broken.json"), "-o",
                 str(tmp / "b.ftrie")]) == 2
    assert "cannot read the tokenizer" in capsys.readouterr().err


def test_other_tokenizer_specs(tmp_path):
    from flashtrie.tokenize import load_tokenizer

    sp = tt.sentencepiece_model(tmp_path)
    assert load_tokenizer(str(tmp_path / "sp.model")).encode("red shoes") == sp.encode("red shoes")
    enc = tt.tiktoken_encoding()
    lines = [f"{__import__('base64').b64encode(k).decode()} {v}" for k, v in enc._mergeable_ranks.items()]
    (tmp_path / "tiny.tiktoken").write_text("\n".join(lines) + "\n")
    assert load_tokenizer(str(tmp_path / "tiny.tiktoken")).encode_ordinary("red shoes") == enc.encode_ordinary(
        "red shoes")
    tt.transformers_fast().save_pretrained(tmp_path / "hf")
    assert load_tokenizer(str(tmp_path / "hf"))("red", add_special_tokens=False)["input_ids"] == tt.bpe().encode(
        "red", add_special_tokens=False).ids
    with pytest.raises(Exception, match="unknown encoding"):
        load_tokenizer("tiktoken:no_such_encoding")


def test_own_arrays_load_or_say_how_to_write_them(tmp_path, capsys):
    seqs = [[4, 5, 6], [4, 5], [70_000]]
    ks = KeywordSet.from_sequences(seqs)
    padded = np.array([[4, 5, 6], [4, 5, -1], [70_000, -1, -1]])
    np.savez(tmp_path / "own.npz", tokens=ks.tokens, offsets=ks.offsets)
    np.savez(tmp_path / "padded.npz", keywords=padded)
    np.save(tmp_path / "padded.npy", padded)
    np.save(tmp_path / "padded_u32.npy", padded.astype(np.uint32))
    for name in ("own.npz", "padded.npz", "padded.npy", "padded_u32.npy"):
        out = tmp_path / f"{name}.ftrie"
        assert main(["build", str(tmp_path / name), "-o", str(out), "--quiet"]) == 0, name
        ix = NarrowLoudsIndex.load(out)
        assert [ix.lookup(s) for s in seqs] == [0, 1, 2]
    np.savez(tmp_path / "other.npz", a=padded, b=padded)
    np.save(tmp_path / "flat.npy", ks.tokens)
    np.save(tmp_path / "gap.npy", np.array([[4, -1, 5]]))
    for name, match in [("other.npz", "np.savez(PATH, tokens=TOKENS, offsets=OFFSETS)"),
                        ("flat.npy", "1-D uint32 array"), ("gap.npy", "array[0, 2]: token 5 after padding")]:
        assert main(["build", str(tmp_path / name), "-o", str(tmp_path / "x.ftrie")]) == 2
        assert match in capsys.readouterr().err, name
    np.savez(tmp_path / "bad_off.npz", tokens=ks.tokens, offsets=ks.offsets[::-1])
    assert main(["build", str(tmp_path / "bad_off.npz"), "-o", str(tmp_path / "x.ftrie")]) == 2
    assert "its 'tokens' and 'offsets' are not a keyword library" in capsys.readouterr().err


def test_help_documents_the_tsv_format(capsys):
    for cmd in ("search", "parity"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        assert 'NAME<TAB>{"indices"' in capsys.readouterr().out
