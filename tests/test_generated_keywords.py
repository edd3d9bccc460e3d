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
        (dict(sequences=rows[0]), "2-D integer"),
        (dict(sequences=rows.astype(float)), "2-D integer"),
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
