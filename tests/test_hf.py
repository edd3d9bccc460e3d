"""`flashtrie.hf` with real transformers models (random weights, no download): the processor gives the same
sequences and scores as transformers' own `prefix_allowed_tokens_fn` hook over a dict trie."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList, T5Config, T5ForConditionalGeneration  # noqa: E402

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex  # noqa: E402
from flashtrie.hf import TrieLogitsProcessor, prefix_allowed_tokens_fn  # noqa: E402

EOS = 1
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _keywords(vocab: int, seed: int) -> list[list[int]]:
    """Variable lengths 1-6, shared stems, keywords that are prefixes of others; no EOS, no pad (0)."""
    rng = np.random.default_rng(seed)
    kws: list[list[int]] = []
    for _ in range(40):
        if kws and rng.random() < 0.5:
            src = kws[int(rng.integers(len(kws)))]
            stem = src[: int(rng.integers(0, len(src) + 1))]
            kws.append(stem + rng.integers(2, vocab, size=int(rng.integers(0 if stem else 1, 3))).tolist())
        else:
            kws.append(rng.integers(2, vocab, size=int(rng.integers(1, 6))).tolist())
    return [k[:6] for k in kws if k]


class DictTrieFn:
    """The usual hand-written callback: a nested dict trie, walked per row per step."""

    def __init__(self, kws: list[list[int]], prompt_length: int) -> None:
        self.root: dict = {}
        for kw in kws:
            d = self.root
            for x in kw:
                d = d.setdefault(x, {})
            d[EOS] = {}
        self.p = prompt_length

    def __call__(self, batch_id: int, sent: torch.Tensor) -> list[int]:
        d = self.root
        for x in sent.tolist()[self.p:]:
            if x not in d:
                return [EOS]
            d = d[x]
        return sorted(d) or [EOS]


def _gpt2(vocab: int) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=EOS,
                     eos_token_id=EOS, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def _t5(vocab: int) -> T5ForConditionalGeneration:
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=vocab, d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2, eos_token_id=EOS,
                   pad_token_id=0, decoder_start_token_id=0)
    return T5ForConditionalGeneration(cfg).eval()


def _generate(model, prompt, beams: int, **kw):
    with torch.no_grad():
        return model.generate(prompt, num_beams=beams, do_sample=False, max_new_tokens=7, eos_token_id=EOS,
                              pad_token_id=0, output_scores=True, return_dict_in_generate=True, **kw)


def _continuations(seq: torch.Tensor, p: int) -> list[list[int]]:
    out = []
    for row in seq.tolist():
        gen = row[p:]
        out.append(gen[: gen.index(EOS) + 1] if EOS in gen else gen)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["gpt2", "t5"])
@pytest.mark.parametrize(("vocab", "beams"), [(1000, 1), (1000, 4), (1000, 8), (50_000, 4), (50_000, 8)])
def test_generate_equals_prefix_allowed_tokens_fn(arch: str, vocab: int, beams: int, device: str) -> None:
    kws = _keywords(vocab, seed=vocab + beams)
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    model = (_gpt2 if arch == "gpt2" else _t5)(vocab).to(device)
    prompt = torch.randint(2, vocab, (3, 4), generator=torch.Generator().manual_seed(beams)).to(device)
    p = prompt.shape[1] if arch == "gpt2" else 1  # decoder-only: the prompt; T5: the decoder start token
    proc = TrieLogitsProcessor(index, eos_token_id=EOS)
    ours = _generate(model, prompt, beams, logits_processor=LogitsProcessorList([proc]))
    ref = _generate(model, prompt, beams, prefix_allowed_tokens_fn=DictTrieFn(kws, p))
    assert torch.equal(ours.sequences, ref.sequences)
    for a, b in zip(ours.scores, ref.scores, strict=True):
        assert torch.equal(a, b)
    if beams > 1:
        assert torch.equal(ours.sequences_scores, ref.sequences_scores)
    words = {tuple(k) for k in kws}
    for gen in _continuations(ours.sequences, p):
        assert gen[-1] == EOS and tuple(gen[:-1]) in words, gen
    assert proc.dead_count == 0
    if device == "cuda":  # the GPU stepper did the work, not the CPU fallback
        assert proc._gpu and all(g is not None for g in proc._gpu.values())


@pytest.mark.parametrize("device", DEVICES)
def test_adapter_and_sampling(device: str) -> None:
    """Our `prefix_allowed_tokens_fn` adapter equals the processor; sampling also spells keywords."""
    vocab = 1000
    kws = _keywords(vocab, seed=3)
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    model = _gpt2(vocab).to(device)
    prompt = torch.randint(2, vocab, (2, 5), generator=torch.Generator().manual_seed(1)).to(device)
    a = _generate(model, prompt, 4, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn(index, EOS, 5))
    b = _generate(model, prompt, 4, logits_processor=LogitsProcessorList([TrieLogitsProcessor(index, EOS,
                                                                                              prompt_length=5)]))
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.sequences_scores, b.sequences_scores)
    torch.manual_seed(7)
    with torch.no_grad():
        s = model.generate(prompt.repeat(8, 1), do_sample=True, top_k=0, max_new_tokens=7, eos_token_id=EOS,
                           pad_token_id=0, logits_processor=LogitsProcessorList([TrieLogitsProcessor(index, EOS)]))
    words = {tuple(k) for k in kws}
    for gen in _continuations(s, 5):
        assert gen[-1] == EOS and tuple(gen[:-1]) in words, gen


@pytest.mark.parametrize("seed", range(6))
def test_cpu_states_carried_between_calls_equal_a_fresh_walk(seed: int) -> None:
    """The numpy path's carried states (a row whose suffix less its last token was a row of the last call):
    rows reordered, duplicated and replaced between calls as beam search does, tokens that leave the trie,
    EOS, per-row prompt lengths: every call's scores equal those of a processor with nothing carried."""
    rng = np.random.default_rng(seed)
    vocab = 40
    kws = [k for k in _keywords(vocab, seed)]
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    prompt = [3, 5] if seed % 2 else 3
    proc = TrieLogitsProcessor(index, EOS, prompt_length=prompt)
    rows = 6
    ids = torch.as_tensor(rng.integers(2, vocab, size=(rows, 5)))
    for _ in range(8):
        scores = torch.randn(rows, vocab)
        fresh = TrieLogitsProcessor(index, EOS, prompt_length=prompt)(ids, scores.clone())
        got = proc(ids, scores.clone())
        assert torch.equal(got.view(torch.int32), fresh.view(torch.int32))
        allowed = [np.flatnonzero(np.isfinite(r)) for r in got.numpy()]
        # beam search: rows continue (copies of) earlier rows of their batch item (of 3 rows here)
        parent = np.arange(rows) // 3 * 3 + rng.integers(0, 3, size=rows)
        nxt = [int(rng.choice(allowed[p])) if len(allowed[p]) and rng.random() < 0.8 else int(rng.integers(0, vocab))
               for p in parent]
        ids = torch.cat([ids[torch.as_tensor(parent)], torch.as_tensor(nxt)[:, None]], 1)
        if rng.random() < 0.3:  # a row from nowhere (no carried state)
            ids[int(rng.integers(rows)), -2] = int(rng.integers(2, vocab))
    assert proc._carried >= 5 * rows  # most rows took their state from the call before


def test_processor_masks_directly() -> None:
    """Per-row prompt lengths, a row that left the trie (only EOS, counted), bfloat16 scores."""
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6], [5, 7, 8], [9]]))
    proc = TrieLogitsProcessor(index, EOS, prompt_length=[2, 1, 3])
    ids = torch.tensor([[3, 3, 5, 7], [3, 5, 6, 2], [4, 4, 4, 9]])
    scores = torch.zeros(3, 12, dtype=torch.bfloat16)
    copy = TrieLogitsProcessor(index, EOS, prompt_length=[2, 1, 3], inplace=False)(ids, scores)
    assert torch.equal(scores, torch.zeros_like(scores))  # inplace=False: a masked copy
    out = proc(ids, scores)
    allowed = [torch.nonzero(torch.isfinite(r)).flatten().tolist() for r in out]
    assert allowed == [[8], [EOS], [EOS]] and proc.dead_count == 1
    assert out is scores and out.dtype == torch.bfloat16 and torch.equal(copy, out)  # in place by default


@pytest.mark.parametrize("device", DEVICES)
def test_processor_writes_in_place(device: str) -> None:
    """float32 scores: the returned tensor is ``scores``; allowed entries keep their exact bits (-0.0, NaN
    included), every other entry is -inf; rows strided inside a wider tensor work the same."""
    kws = [[5, 6], [5, 7, 8], [9], [300, 2]]
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    ids = torch.tensor([[0, 5], [0, 5], [0, 9], [0, 0], [0, 300]], device=device)
    rng = np.random.default_rng(0)
    base = rng.normal(size=(5, 400)).astype(np.float32)
    base[:, 6], base[:, 7], base[1, 8] = -0.0, np.nan, np.inf
    want_allowed = [{6, 7}, {6, 7}, {EOS}, {EOS}, {2}]  # row 1 as row 0; row 3 left the trie
    for wide in (False, True):
        big = torch.zeros(5, 403 if wide else 400, device=device)
        scores = big[:, 1:401] if wide else big
        scores.copy_(torch.as_tensor(base))
        proc = TrieLogitsProcessor(index, EOS, prompt_length=1)
        out = proc(ids, scores)
        assert out is scores
        got = out.cpu().numpy()
        for r, allowed in enumerate(want_allowed):
            keep = np.zeros(400, dtype=bool)
            keep[list(allowed)] = True
            assert np.array_equal(got[r, keep].view(np.uint32), base[r, keep].view(np.uint32)), r
            assert np.all(got[r, ~keep] == -np.inf), r
        if wide:
            assert not big[:, 0].any() and not big[:, 401:].any()
        assert proc.dead_count == 1


def test_refusals() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6], [20]]))
    with pytest.raises(InputError, match="occurs in the trie"):
        TrieLogitsProcessor(index, 6)
    with pytest.raises(InputError, match="backend"):
        TrieLogitsProcessor(index, 1, backend="tpu")
    with pytest.raises(InputError, match="prompt_length"):
        TrieLogitsProcessor(index, 1, prompt_length=-1)
    proc = TrieLogitsProcessor(index, 1)
    with pytest.raises(InputError, match="not below vocab_size 20"):
        proc(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 20))
    with pytest.raises(InputError, match="prompt_length"):
        prefix_allowed_tokens_fn(index, 1, -2)


@pytest.mark.parametrize("device", DEVICES)
def test_prompt_lookup_decoding_keeps_the_inferred_prompt(device: str) -> None:
    """Prompt-lookup (assisted) decoding calls the processor at cur_len + i for its candidates, then again at a
    shorter length: with prompt_length=None the prompt must stay the first call's, so the output is a keyword."""
    kws = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 11, 12], [20, 21]]
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=2, eos_token_id=EOS, pad_token_id=0)
    model = GPT2LMHeadModel(cfg).eval().to(device)
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10, 3, 5, 6, 7, 8, 11, 12, 3, 5]], device=device)
    outs = []
    for p in (None, prompt.shape[1]):
        proc = TrieLogitsProcessor(index, EOS, prompt_length=p)
        lengths: list[int] = []

        def spy(ids, begin=proc._begin, lengths=lengths):
            lengths.append(ids.shape[1])
            return begin(ids)

        proc._begin = spy
        with torch.no_grad():
            out = model.generate(prompt, logits_processor=LogitsProcessorList([proc]), max_new_tokens=8,
                                 eos_token_id=EOS, pad_token_id=0, do_sample=False, prompt_lookup_num_tokens=4)
        gen = out[0, prompt.shape[1]:].tolist()
        assert EOS in gen and gen[: gen.index(EOS)] in kws, (p, gen)
        outs.append(gen)
    assert any(b <= a for a, b in zip(lengths, lengths[1:], strict=False)), "no call went back: not assisted"
    assert outs[0] == outs[1]


def test_a_new_prompt_is_inferred_again() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6], [20]]))
    proc = TrieLogitsProcessor(index, EOS)

    def allowed(ids: list[list[int]]) -> list[int]:
        return torch.isfinite(proc(torch.tensor(ids), torch.zeros(len(ids), 24))).nonzero()[:, 1].tolist()

    assert allowed([[3, 4]]) == [5, 20]  # prompt [3, 4]
    assert allowed([[3, 4, 5]]) == [6]  # one token more: continues
    assert allowed([[3, 4, 5, 6]]) == [1]  # [5, 6] ends: EOS only
    assert allowed([[3, 4, 5]]) == [6]  # shorter, same prompt (assisted decoding's step back): continues
    assert allowed([[7, 7, 7, 7, 7]]) == [5, 20]  # not one token more, another prompt: inferred again
    assert allowed([[7, 7, 7, 7, 7, 20]]) == [1]
    assert allowed([[7, 7, 7, 7, 7, 20], [7, 7, 7, 7, 7, 20]]) == [5, 20, 5, 20]  # other rows: a new prompt


def test_carried_states_do_not_mix_dtypes() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[3, 4], [3, 0, 4, 5]]))
    proc = TrieLogitsProcessor(index, EOS, prompt_length=2)
    proc(torch.tensor([[9, 9, 3]], dtype=torch.int64), torch.zeros(1, 16))
    s = proc(torch.tensor([[9, 9, 3, 0, 4]], dtype=torch.int32), torch.zeros(1, 16))
    assert torch.isfinite(s[0]).nonzero().flatten().tolist() == [5]


def test_bad_arguments_are_refused_before_any_state_changes() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6], [20]]))
    with pytest.raises(InputError, match="prompt_length: expected an int or a sequence"):
        TrieLogitsProcessor(index, 1, prompt_length=2.0)
    proc = TrieLogitsProcessor(index, 1)
    with pytest.raises(InputError, match="scores: expected float16, bfloat16, float32 or float64 logits, got "
                                           "torch.int64"):
        proc(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 24, dtype=torch.long))
    with pytest.raises(InputError, match="input_ids: expected integer token ids, got torch.float32"):
        proc(torch.zeros(1, 3), torch.zeros(1, 24))
    assert proc._inferred is None and proc._last_len == -1


def _allowed(proc: TrieLogitsProcessor, ids: list[list[int]], vocab: int = 24) -> list[list[int]]:
    out = proc(torch.tensor(ids), torch.zeros(len(ids), vocab))
    return [torch.isfinite(r).nonzero().flatten().tolist() for r in out]


def test_prompt_inference_rules() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6], [20]]))
    proc = TrieLogitsProcessor(index, EOS)
    assert _allowed(proc, [[3, 4]]) == [[5, 20]]
    assert _allowed(proc, [[9, 9, 5]]) == [[6]]  # one token longer continues, with no comparison (documented)
    proc.reset()
    assert _allowed(proc, [[3, 4]]) == [[5, 20]]
    assert _allowed(proc, [[3, 4, 5], [3, 4, 5]]) == [[5, 20], [5, 20]]  # more rows: a new prompt
    proc.reset()
    ids = torch.tensor([[3, 4]])
    proc(ids, torch.zeros(1, 24))
    ids[0] = 7  # the caller reuses its buffer: the processor kept a copy of the prompt
    assert _allowed(proc, [[3, 4, 5, 6]]) == [[EOS]]


def test_per_row_prompt_lengths() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[7, 5, 6], [6, 2]]))
    proc = TrieLogitsProcessor(index, EOS, prompt_length=[3, 5])
    ids = torch.tensor([[0, 0, 0, 7, 5], [0, 0, 0, 7, 5]])  # the same ids, two different suffixes
    proc(ids, torch.zeros(2, 10))
    assert _allowed(proc, torch.cat([ids, torch.tensor([[6], [6]])], 1).tolist(), 10) == [[EOS], [2]]
    with pytest.raises(InputError, match="prompt_length: 9 is longer than input_ids"):
        TrieLogitsProcessor(index, EOS, prompt_length=[2, 9])(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 10))
    for bad in ([2, -1], [True, 2]):
        with pytest.raises(InputError, match="prompt_length"):
            TrieLogitsProcessor(index, EOS, prompt_length=bad)


def test_scores_that_require_grad_are_masked_in_a_copy() -> None:
    proc = TrieLogitsProcessor(NarrowLoudsIndex.build(KeywordSet.from_sequences([[5, 6]])), EOS, prompt_length=1)
    scores = torch.zeros(1, 10, requires_grad=True)
    out = proc(torch.tensor([[0]]), scores)
    assert out is not scores and torch.isfinite(out[0]).nonzero().flatten().tolist() == [5]
    assert torch.equal(scores.detach(), torch.zeros(1, 10))


def test_a_finished_row_is_walked_with_eos() -> None:
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([[9], [5, 6]]))
    proc = TrieLogitsProcessor(index, EOS, prompt_length=1)
    assert _allowed(proc, [[0, 9, EOS, 0]], 10) == [[EOS]] and proc.dead_count == 0  # FINISHED, not DEAD
    fn = prefix_allowed_tokens_fn(index, EOS, 5)
    assert fn(0, torch.tensor([3, 4])) == [5, 9]  # a row shorter than prompt_length: the root's tokens


