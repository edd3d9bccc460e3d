"""`flashtrie.hf.generated_keywords`: generate()'s rows back to keyword ids (and strings), against a plain
Python reading of each row."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList  # noqa: E402

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex  # noqa: E402
from flashtrie.hf import TrieLogitsProcessor, generated_keywords  # noqa: E402

EOS, PAD = 1, 0
KWS = [[5, 6], [5, 6, 7], [8], [9, 10, 11, 12], [13, 5]]


@pytest.fixture(scope="module")
def index():
    return NarrowLoudsIndex.build(KeywordSet.from_sequences(KWS))


def plain(kws, rows, eos, begin):
    """Each row's keyword id the slow way: its tokens after the prompt up to the first EOS, looked up."""
    out = []
    for row, b in zip(rows, begin, strict=True):
        rest = list(row[b:])
        cut = next((i for i, x in enumerate(rest) if x in eos), None)
        out.append(kws.index(rest[:cut]) if cut is not None and rest[:cut] in kws else -1)
    return out


def test_rows_that_end_early_are_padded_or_cut(index):
    rows = np.array([
        [3, 4, 5, 6, EOS, PAD, PAD],  # a keyword, EOS, padding
        [3, 4, 5, 6, 7, EOS, EOS],  # the longer keyword; padding equal to EOS
        [3, 4, 8, EOS, 5, 6, 7],  # what follows EOS is not read
        [3, 4, 9, 10, 11, 12, 13],  # cut by max_new_tokens: no EOS
        [3, 4, 5, EOS, PAD, PAD, PAD],  # EOS before the keyword ends
        [3, 4, EOS, PAD, PAD, PAD, PAD],  # nothing generated
        [3, 4, 6, 5, EOS, PAD, PAD],  # off the trie
        [EOS, EOS, 13, 5, EOS, PAD, PAD],  # EOS inside the prompt is not an end
    ])
    want = [0, 1, 2, -1, -1, -1, -1, 4]
    assert generated_keywords(index, rows, EOS, 2).tolist() == want
    got = generated_keywords(index, torch.from_numpy(rows), [EOS], 2)
    assert got.dtype == np.int64 and got.tolist() == want
    assert generated_keywords(index, rows.astype(np.int32), (EOS, 2), np.full(8, 2)).tolist() == want


def test_beams_with_per_item_prompt_lengths_and_several_eos(index):
    # 2 batch items x 3 beams; item 0's prompt is 1 token (left-padded prompts keep one length in practice;
    # per-item lengths are what encoder-decoder or unpadded callers pass)
    rows = np.array([[2, 8, 15, PAD], [2, 5, 6, 15], [2, 5, 6, 7], [2, 2, 13, 5], [2, 2, 8, EOS], [2, 2, 9, 10]])
    assert generated_keywords(index, rows, [EOS, 15], [1, 2]).tolist() == [2, 0, -1, -1, 2, -1]
    with pytest.raises(InputError, match="2 values do not divide the 3 rows"):
        generated_keywords(index, rows[:3], EOS, [1, 2])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([EOS, PAD, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]), min_size=6, max_size=6),
                min_size=1, max_size=12), st.integers(0, 6), st.sampled_from([(EOS,), (EOS, PAD), (EOS, 14)]))
def test_matches_a_plain_reading_of_each_row(index, rows, prompt, eos):
    arr = np.array(rows)
    assert generated_keywords(index, arr, list(eos), prompt).tolist() == plain(KWS, rows, eos, [prompt] * len(rows))


def test_bad_input_refused(index):
    rows = np.array([[5, 6, EOS]])
    for kw, match in [
        (dict(sequences=rows[0]), "sequences: expected a 2-D array"),
        (dict(sequences=rows.astype(float)), "sequences: expected integer token ids, got dtype float64"),
        (dict(sequences=rows.astype(bool)), "sequences: expected integer token ids, got dtype bool"),
        (dict(sequences=rows.astype(object)), "sequences: expected integer token ids, got dtype object"),
        (dict(sequences=torch.tensor([[5.0, 6.0]])), r"sequences: .* torch.float32\[1, 2\]"),
        (dict(sequences=torch.tensor([[5.0, 6.0]], dtype=torch.bfloat16)), "sequences: .* torch.bfloat16"),
        (dict(sequences=torch.tensor([[True]])), "sequences: .* torch.bool"),
        (dict(sequences=[[5, 6, EOS], [5, EOS]]), "sequences: .*rows of one length"),
        (dict(sequences=[[5, 6], "ab"]), "sequences: "),
        (dict(sequences=[[2**70, 1]]), "sequences: expected integer token ids, got dtype object"),
        (dict(prompt_length=[1, True]), "prompt_length"),
        (dict(prompt_length=4), "longer than the sequences"),
        (dict(prompt_length=-1), "prompt_length"),
        (dict(prompt_length=None), "prompt_length"),
        (dict(eos_token_id=[]), "eos_token_id"),
        (dict(eos_token_id=5), "occurs in the trie"),
        (dict(index=KWS), "NarrowLoudsIndex"),
    ]:
        args = dict(index=index, sequences=rows, eos_token_id=EOS, prompt_length=0) | kw
        with pytest.raises(InputError, match=match):
            generated_keywords(**args)


def test_constrained_generate_gives_back_whole_keywords_and_strings():
    names = ["red shoes", "red shirt", "blue hat", "green", "red"]
    vocab = {c: i + 2 for i, c in enumerate(sorted(set("".join(names))))}
    tok = lambda s: [vocab[c] for c in s]  # noqa: E731 - one token per character
    index = NarrowLoudsIndex.build(KeywordSet.from_texts(names, tok))
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=40, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=EOS,
                     eos_token_id=EOS, pad_token_id=PAD)
    model = GPT2LMHeadModel(cfg).eval()
    prompt = torch.tensor([[3, 4, 5], [6, 7, 8]])
    for new_tokens, beams in ((12, 3), (4, 2)):
        proc = TrieLogitsProcessor(index, EOS)
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens, num_beams=beams,
                             num_return_sequences=beams, do_sample=False, pad_token_id=PAD, eos_token_id=EOS,
                             logits_processor=LogitsProcessorList([proc]))
        ids = generated_keywords(index, out, EOS, prompt.shape[1])
        assert ids.tolist() == plain([tok(n) for n in names], out.tolist(), (EOS,), [3] * out.shape[0])
        if new_tokens == 12:  # room for every keyword: every row ends one
            assert (ids >= 0).all()
            assert [index.text(int(i)) for i in ids] == [index.texts(ids)[r] for r in range(ids.size)]
            assert all(index.text(int(i)) in names for i in ids)
        else:  # 4 new tokens: "red" + EOS fits; longer keywords are cut
            assert all(i == -1 or names[i] == "red" for i in ids.tolist())


@pytest.mark.parametrize("make", [lambda: np.zeros((3, 0)), lambda: np.zeros((3, 0), dtype=np.int32),
                                  lambda: torch.zeros((3, 0)), lambda: torch.zeros((3, 0), dtype=torch.int64),
                                  lambda: [[], [], []]])
def test_rows_of_length_zero_spell_nothing(index, make):
    got = generated_keywords(index, make(), EOS, 0)
    assert got.dtype == np.int64 and got.tolist() == [-1, -1, -1]
    assert generated_keywords(index, np.zeros((0, 4), dtype=np.int64), EOS, 2).tolist() == []


NUMPY_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
TORCH_INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8] + [
    getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)]


def test_every_integer_dtype_reads_the_same(index):
    rows = np.array([[3, 5, 6, EOS, PAD], [3, 8, EOS, 9, 9], [3, 13, 5, EOS, EOS], [3, 9, 10, 11, 12]])
    want = [0, 2, 4, -1]
    for dt in NUMPY_INTS:
        assert generated_keywords(index, rows.astype(dt), EOS, 1).tolist() == want, dt
    for dt in TORCH_INTS:
        assert generated_keywords(index, torch.from_numpy(rows).to(dt), EOS, 1).tolist() == want, dt


def test_values_outside_the_token_range_spell_no_keyword(index):
    """A value that is no token (negative, or past MAX_TOKEN, in whatever dtype) leaves the trie before EOS and
    is never taken for EOS (int8's -1 and 255 as uint8 are different values; uint64's 2**64 - 1 does not wrap
    into -1 = a match of anything)."""
    base = np.array([[5, 6, EOS], [8, EOS, 0], [9, 9, 9]])
    for dt, bad in [(np.int8, -1), (np.int16, -32768), (np.int64, -(2**63)), (np.int64, 2**32 - 1),
                    (np.int64, 2**40 + 8), (np.uint64, 2**64 - 1), (np.uint64, 2**63 + 8), (np.uint32, 2**32 - 1)]:
        rows = base.astype(dt)
        rows[0, 1] = bad  # inside row 0's keyword: no keyword
        rows[1, 2] = bad  # after row 1's EOS: not read
        assert generated_keywords(index, rows, EOS, 0).tolist() == [-1, 2, -1], (dt, bad)
    t = torch.tensor([[5, -1, EOS], [8, EOS, -5]], dtype=torch.int64)
    assert generated_keywords(index, t, EOS, 0).tolist() == [-1, 2]


TOKENS = [EOS, PAD, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -1, -200, 2**32 - 1, 2**33 + 5]


def brute(rows, eos, begin):
    """Each row the slow way, over Python ints: the values after the prompt up to the first EOS, one keyword."""
    out = []
    for row, b in zip(rows, begin, strict=True):
        rest = [int(x) for x in row[b:]]
        cut = next((i for i, x in enumerate(rest) if x in eos), None)
        out.append(KWS.index(rest[:cut]) if cut is not None and rest[:cut] in KWS else -1)
    return out


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 9), st.integers(0, 7), st.data())
def test_any_dtype_matches_a_brute_force_reading(index, n_rows, width, data):
    dt = data.draw(st.sampled_from(NUMPY_INTS + ["torch-int64", "torch-int32", "torch-uint8", "list"]))
    info = np.iinfo(np.int64 if isinstance(dt, str) else dt)
    pool = [v for v in TOKENS if info.min <= v <= info.max] if dt not in ("torch-int32", "torch-uint8") else \
        [v for v in TOKENS if 0 <= v < 128 or (dt == "torch-int32" and -2**31 <= v < 2**31)]
    rows = data.draw(st.lists(st.lists(st.sampled_from(pool), min_size=width, max_size=width),
                              min_size=n_rows, max_size=n_rows))
    prompt = data.draw(st.integers(0, width) | st.lists(st.integers(0, width), min_size=n_rows or 1,
                                                         max_size=n_rows or 1))
    begin = [prompt] * n_rows if isinstance(prompt, int) else prompt[:n_rows]
    if dt == "list":
        seq = rows if n_rows and width else np.zeros((n_rows, width), dtype=np.int64)
    elif isinstance(dt, str):
        seq = torch.tensor(rows, dtype=getattr(torch, dt.split("-")[1])).reshape(n_rows, width)
    else:
        seq = np.array(rows, dtype=dt).reshape(n_rows, width)
    assert generated_keywords(index, seq, EOS, prompt).tolist() == brute(rows, (EOS,), begin)
