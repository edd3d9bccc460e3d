"""`TrieLogitsProcessor` against transformers' own `prefix_allowed_tokens_fn` hook under every logits processor
and warper `generate()` adds (the list of `GenerationMixin._get_logits_processor`), alone and combined, greedy,
sampling (fixed seed) and beam search, on tiny random GPT-2 (decoder-only) and BART (encoder-decoder; its
default config sets ``forced_eos_token_id``) models built from configs.  The comparisons with the hook adapt
to the installed transformers (see `_reference_skip`), and the processor's CUDA path is compared with its CPU path
on the same weights, whatever the hook does."""

from __future__ import annotations

import copy
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers import (  # noqa: E402
    BartConfig,
    BartForConditionalGeneration,
    GenerationConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LogitsProcessorList,
    WatermarkingConfig,
)

from flashtrie import InputError, KeywordSet, NarrowLoudsIndex  # noqa: E402
from flashtrie.hf import TrieLogitsProcessor, generated_keywords, in_hook_position  # noqa: E402

V = 64
EOS = 2  # BART's EOS; GPT-2 uses it too
KWS = [[10, 11, 12, 13, 14, 15], [5, 5], [5, 6], [5], [7, 8, 9], [7, 8], [20, 21, 22], [30]]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class DictTrie:
    """The hand-written hook callback: a nested dict trie walked per row per step (EOS after a keyword;
    only EOS off the trie or after EOS)."""

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


_MODELS: dict = {}


def _model(arch: str, device: str):
    """One model per architecture, built on the CPU with a fixed seed; other devices get a copy of its weights."""
    if (arch, device) not in _MODELS and device != "cpu":
        _MODELS[arch, device] = copy.deepcopy(_model(arch, "cpu")).to(device)
    if (arch, device) not in _MODELS:
        torch.manual_seed(0)
        if arch == "gpt2":
            cfg = GPT2Config(vocab_size=V, n_positions=64, n_embd=16, n_layer=1, n_head=2, eos_token_id=EOS,
                             bos_token_id=EOS, pad_token_id=0)
            m = GPT2LMHeadModel(cfg)
        else:
            cfg = BartConfig(vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                             max_position_embeddings=64)
            m = BartForConditionalGeneration(cfg)
        _MODELS[arch, device] = m.eval()
    return _MODELS[arch, device]


INDEX = NarrowLoudsIndex.build(KeywordSet.from_sequences(KWS))
PROMPT = [[3, 4, 5, 6], [9, 8, 7, 40]]

# every setting `_get_logits_processor` turns into a processor or warper (transformers 5.x), with a value that
# acts on these models and keywords; the hook runs after the first group and before the second
BEFORE_HOOK = {
    "sequence_bias": {"sequence_bias": {(5,): -float("inf"), (7, 8): -4.0}},
    "repetition_penalty": {"repetition_penalty": 1.7},
    "encoder_repetition_penalty": {"encoder_repetition_penalty": 1.5},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 1},
    "encoder_no_repeat_ngram_size": {"encoder_no_repeat_ngram_size": 1},
    "bad_words_ids": {"bad_words_ids": [[6], [12]]},
    "min_length": {"min_length": 6},
    "min_new_tokens": {"min_new_tokens": 3},
    "guidance_scale": {"guidance_scale": 1.5},
}
AFTER_HOOK = {
    "forced_bos_token_id": {"forced_bos_token_id": 10},
    "forced_eos_token_id": {"forced_eos_token_id": EOS},
    "remove_invalid_values": {"remove_invalid_values": True},
    "exponential_decay_length_penalty": {"exponential_decay_length_penalty": (1, 1.5)},
    "suppress_tokens": {"suppress_tokens": [11, 21]},
    "begin_suppress_tokens": {"begin_suppress_tokens": [5, 7]},
}
WARPERS = {
    "temperature": {"temperature": 0.7},
    "top_k": {"top_k": 3},
    "top_p": {"top_p": 0.6},
    "min_p": {"min_p": 0.2},
    "typical_p": {"typical_p": 0.5},
    "epsilon_cutoff": {"epsilon_cutoff": 0.05},
    "eta_cutoff": {"eta_cutoff": 0.05},
    "top_h": {"top_h": 0.5},
}
LAST = {
    "watermarking_config": {"watermarking_config": WatermarkingConfig(bias=2.0, greenlist_ratio=0.5)},
    "renormalize_logits": {"renormalize_logits": True},
}
ALL = {**BEFORE_HOOK, **AFTER_HOOK, **WARPERS, **LAST}
MODES = {"greedy": {"num_beams": 1}, "sample": {"do_sample": True, "num_beams": 1},
         "beams": {"num_beams": 3, "num_return_sequences": 2}, "beam_sample": {"do_sample": True, "num_beams": 2}}


# settings that run before the hook and can mask every allowed token of a row (-inf); the others before it
# (the repetition penalties, guidance_scale) keep finite logits finite
MASKING = {"sequence_bias", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "min_length",
           "min_new_tokens"}
DROPS = ("this transformers' hook drops the constraint where every allowed token is -inf; the processor keeps it")


def _hook_forces() -> bool:
    """Whether the installed hook forces the allowed tokens of a batch item whose allowed entries are all -inf
    (recent transformers releases) or leaves them -inf, dropping the constraint there (earlier ones)."""
    from transformers.generation.logits_process import PrefixConstrainedLogitsProcessor

    hook = PrefixConstrainedLogitsProcessor(lambda batch_id, sent: [1], num_beams=1)
    out = hook(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[0.0, -math.inf, 0.0]]))
    return bool(out[0, 1] == 0)


def _after_hook_all_inf() -> set[str]:
    """Settings after the hook that can leave a row with no finite entry: ``suppress_tokens`` of the only
    allowed token, and (where the installed release turns a -inf EOS into NaN) the length penalty."""
    from transformers.generation.logits_process import ExponentialDecayLengthPenalty

    decay = ExponentialDecayLengthPenalty((0, 1.5), EOS, 1)
    scores = torch.zeros(1, V)
    scores[0, EOS] = -math.inf
    nan = bool(decay(torch.zeros(1, 3, dtype=torch.long), scores).isnan().any())
    return {"suppress_tokens"} | ({"exponential_decay_length_penalty"} if nan else set())


#: The generation settings the installed transformers knows (older releases lack some, ``top_h`` for one).
_KNOWN_SETTINGS = set(vars(GenerationConfig()))


def _reference_skip(names: tuple[str, ...], device: str, mode: str) -> str | None:
    """Why the hook cannot be the reference for ``names`` here (None: it can)."""
    if set(names) & MASKING and not _hook_forces():
        return DROPS
    if device != "cpu" and "sample" in mode and set(names) & _after_hook_all_inf():
        return ("sampling a row left without a finite entry after the hook is a device-side assert on CUDA (an "
                "error on the CPU): neither the hook nor the processor in its slot is run")
    return None


def _run(arch: str, device: str, mode: str, names: tuple[str, ...], *, ours: str | None, seed: int = 0,
         max_new_tokens: int = 5, grouped: bool = True, proc: TrieLogitsProcessor | None = None):
    """One `generate()`: with the dict-trie hook (``ours=None``), with the processor (``proc``, else a new
    one) in the hook's slot (``"hook"``) or in ``logits_processor=`` (``"list"``)."""
    missing = [k for n in names for k in ALL[n] if k not in _KNOWN_SETTINGS]
    if missing:
        pytest.skip(f"transformers {transformers.__version__} has no generation setting {missing[0]}")
    model = _model(arch, device)
    kw: dict = {**MODES[mode], "max_new_tokens": max_new_tokens, "eos_token_id": EOS, "pad_token_id": 0,
                "output_scores": True, "return_dict_in_generate": True}
    for n in names:
        kw.update(ALL[n])
    if "guidance_scale" in names and arch != "gpt2":
        kw.pop("guidance_scale")
    prompt = torch.tensor(PROMPT, device=device)
    p = prompt.shape[1] if arch == "gpt2" else 1
    proc = TrieLogitsProcessor(INDEX, EOS) if proc is None else proc
    torch.manual_seed(seed)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if ours is None:
            out = model.generate(prompt, prefix_allowed_tokens_fn=DictTrie(KWS, p), **kw)
        elif ours == "hook":
            with in_hook_position(model, proc):
                out = model.generate(prompt, **kw)
        else:  # grouped as the hook groups where equality is expected; else row by row (the default)
            if grouped and arch == "gpt2" and not set(names) & set(AFTER_HOOK):
                proc.num_beams = max(kw.get("num_beams", 1), kw.get("num_return_sequences", 1))
            out = model.generate(prompt, logits_processor=LogitsProcessorList([proc]), **kw)
    return out, p


def _assert_equal(a, b) -> None:
    assert torch.equal(a.sequences, b.sequences), (a.sequences.tolist(), b.sequences.tolist())
    for x, y in zip(a.scores, b.scores, strict=True):  # equal values, NaN where NaN (-0.0 equals 0.0)
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    if getattr(b, "sequences_scores", None) is not None:
        torch.testing.assert_close(a.sequences_scores, b.sequences_scores, rtol=0, atol=0, equal_nan=True)


def _on_trie(out, p: int) -> None:
    """Every generated row follows a trie path: a keyword prefix, or a keyword then EOS and padding (beam
    search: every row of a finite score; a -inf hypothesis fills a place no allowed one could)."""
    words = {tuple(k) for k in KWS}
    prefixes = {tuple(k[:i]) for k in KWS for i in range(len(k) + 1)}
    rows = out.sequences
    if getattr(out, "sequences_scores", None) is not None:
        rows = rows[torch.isfinite(out.sequences_scores)]
    for row in rows.tolist():
        gen = row[p:]
        if EOS in gen:
            assert tuple(gen[: gen.index(EOS)]) in words and set(gen[gen.index(EOS) + 1:]) <= {0, EOS}, gen
        else:
            assert tuple(gen) in prefixes, gen


def _some_row_finite(out, mode: str, grouped: bool) -> None:
    """No row (grouped: no batch item, its beams together, as the hook groups them) left all -inf."""
    group = max(MODES[mode]["num_beams"], MODES[mode].get("num_return_sequences", 1)) if grouped else 1
    for s in out.scores:
        assert (s > -float("inf")).any(dim=1).view(-1, group).any(dim=1).all()


# ---------------------------------------------------------------- the cases found by hand
def test_bart_forced_eos_in_the_hook_slot_equals_the_hook() -> None:
    """BART's default forced_eos_token_id, keyword [10..15], max_new_tokens=3: the hook forces EOS last."""
    model = _model("bart", "cpu")
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences([list(range(10, 16))]))
    x = torch.tensor([[0, 5, 6, 2]])
    for beams in (1, 2):
        kw = {"num_beams": beams, "max_new_tokens": 3, "output_scores": True, "return_dict_in_generate": True}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = model.generate(x, prefix_allowed_tokens_fn=DictTrie([list(range(10, 16))], 1), **kw)
            with in_hook_position(model, TrieLogitsProcessor(index, EOS)):
                got = model.generate(x, **kw)
            listed = model.generate(x, logits_processor=LogitsProcessorList([TrieLogitsProcessor(
                index, EOS, num_beams=beams)]), **kw)
        assert ref.sequences.tolist() == [[2, 10, 11, 2]]
        _assert_equal(got, ref)
        # in logits_processor= the forced EOS (not allowed mid-keyword) gives way to the trie's token
        assert listed.sequences.tolist() == [[2, 10, 11, 12]]
        assert all(torch.isfinite(s).any(dim=1).all() for s in listed.scores)


@pytest.mark.parametrize("position", ["hook", "list"])
@pytest.mark.parametrize(("names", "kws", "want"), [
    (("no_repeat_ngram_size",), [[5, 5]], [5, 5, 2]),
    (("min_new_tokens",), [[5]], [5, 2]),
    (("bad_words_ids",), [[5, 6]], [5, 6, 2]),
])
def test_masked_allowed_tokens_are_forced_as_the_hook_forces_them(position: str, names, kws, want) -> None:
    """A processor before the hook masked every allowed token: the hook forces them, and so does ours, in
    both positions (these settings run before the hook).  A hook that does not force is not run."""
    model = _model("gpt2", "cpu")
    forces = _hook_forces()
    index = NarrowLoudsIndex.build(KeywordSet.from_sequences(kws))
    prompt = torch.tensor([[3, 4]])
    for mode in ("greedy", "beams", "sample"):
        kw = {**MODES[mode], "max_new_tokens": 4, "eos_token_id": EOS, "pad_token_id": 0, "output_scores": True,
              "return_dict_in_generate": True, "num_return_sequences": 1}
        for n in names:
            kw.update(ALL[n])
        kw["min_new_tokens"] = 3 if "min_new_tokens" in names else None
        group = kw["num_beams"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(1)
            ref = model.generate(prompt, prefix_allowed_tokens_fn=DictTrie(kws, 2), **kw) if forces else None
            torch.manual_seed(1)
            proc = TrieLogitsProcessor(index, EOS, num_beams=group)
            if position == "hook":
                with in_hook_position(model, proc):
                    got = model.generate(prompt, **kw)
            else:
                got = model.generate(prompt, logits_processor=LogitsProcessorList([proc]), **kw)
        assert got.sequences[0, 2:].tolist()[: len(want)] == want, mode
        assert all((s > -math.inf).any() for s in got.scores), mode
        if ref is not None:
            _assert_equal(got, ref)


def test_remove_invalid_values_scores_are_the_hooks_in_the_hook_slot() -> None:
    ref, _ = _run("gpt2", "cpu", "greedy", ("remove_invalid_values",), ours=None)
    got, _ = _run("gpt2", "cpu", "greedy", ("remove_invalid_values",), ours="hook")
    _assert_equal(got, ref)
    assert (ref.scores[0] == torch.finfo(torch.float32).min).any()
    listed, _ = _run("gpt2", "cpu", "greedy", ("remove_invalid_values",), ours="list")
    assert torch.equal(listed.sequences, ref.sequences)  # documented: -inf where the hook has the lowest float
    assert torch.isneginf(listed.scores[0]).any()


# ---------------------------------------------------------------- every setting, alone and combined
#: The fast loop runs every setting with GPT-2 in greedy search and beam sampling; the full run adds BART and
#: the other modes.
FAST_MODES = ("greedy", "beam_sample")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", [m if m in FAST_MODES else pytest.param(m, marks=pytest.mark.slow) for m in MODES])
@pytest.mark.parametrize("arch", ["gpt2", pytest.param("bart", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", list(ALL))
def test_each_setting_alone_equals_the_hook(name: str, arch: str, mode: str, device: str) -> None:
    if name in WARPERS and "sample" not in mode:
        pytest.skip("warpers run only when sampling")
    skip = _reference_skip((name,), device, mode)
    if skip is not None:  # the processor in logits_processor= alone: never a crash, never a row of all -inf
        listed, p = _run(arch, device, mode, (name,), ours="list", grouped=False)
        _some_row_finite(listed, mode, False)
        pytest.skip(skip)
    try:
        ref, p = _run(arch, device, mode, (name,), ours=None)
    except RuntimeError as e:  # the hook left a row without a finite entry (`_after_hook_all_inf`)
        assert "probability tensor" in str(e) and name in _after_hook_all_inf()
        with pytest.raises(RuntimeError, match="probability tensor"):
            _run(arch, device, mode, (name,), ours="hook")
        ref = None
    else:
        got, _ = _run(arch, device, mode, (name,), ours="hook")
        _assert_equal(got, ref)
    listed, p = _run(arch, device, mode, (name,), ours="list")  # never a crash
    _some_row_finite(listed, mode, arch == "gpt2" and name not in AFTER_HOOK)
    if ref is not None and name not in AFTER_HOOK and arch != "bart":  # BART forces EOS after the hook
        _assert_equal(listed, ref)
    if name not in ("forced_bos_token_id", "forced_eos_token_id") and arch != "bart" and "beam" not in mode:
        _on_trie(listed, p)  # (beam search returns what the hook returns: a hypothesis cut at max_length included)


@pytest.mark.slow  # 40 generate() runs of combined settings; every setting alone runs in the fast loop
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.sets(st.sampled_from(sorted(ALL)), min_size=2, max_size=6), arch=st.sampled_from(["gpt2", "bart"]),
       mode=st.sampled_from(sorted(MODES)), seed=st.integers(0, 3), max_new_tokens=st.integers(1, 7))
def test_settings_combined_equal_the_hook(names, arch: str, mode: str, seed: int, max_new_tokens: int) -> None:
    names = tuple(sorted(names))
    args = (arch, "cpu", mode, names)
    kw = {"seed": seed, "max_new_tokens": max_new_tokens}
    ref = None
    if _reference_skip(names, "cpu", mode) is None:  # (a hook that drops the constraint is no reference)
        try:
            ref, p = _run(*args, ours=None, **kw)
        except (RuntimeError, ValueError) as e:  # the hook left a row of all -inf: so does the processor in its slot
            with pytest.raises(type(e)):
                _run(*args, ours="hook", **kw)
        else:
            got, _ = _run(*args, ours="hook", **kw)
            _assert_equal(got, ref)
    # logits_processor=, rows forced one by one (the default): never a crash, never a row of all -inf
    listed, _ = _run(*args, ours="list", grouped=False, **kw)
    _some_row_finite(listed, mode, False)
    if ref is not None and not set(names) & set(AFTER_HOOK) and arch == "gpt2":
        _assert_equal(_run(*args, ours="list", **kw)[0], ref)  # grouped as the hook groups: the hook's result


def _old_hook_call(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """transformers' hook before the forcing rule: allowed entries keep their scores, -inf included."""
    mask = torch.full_like(scores, -math.inf)
    for row in range(input_ids.shape[0]):
        mask[row, self._prefix_allowed_tokens_fn(row // self._num_beams, input_ids[row])] = 0
    return scores + mask


def test_a_hook_that_does_not_force_is_detected_and_not_compared(monkeypatch) -> None:
    """Under a hook without the forcing rule (simulated), the comparisons where it drops the constraint skip
    with their reason, the others still compare, and the processor keeps the trie where that hook leaves it."""
    from transformers.generation.logits_process import PrefixConstrainedLogitsProcessor

    monkeypatch.setattr(PrefixConstrainedLogitsProcessor, "__call__", _old_hook_call)
    assert not _hook_forces()
    assert all(_reference_skip((n,), "cpu", m) == DROPS for n in MASKING for m in MODES)
    assert _reference_skip(("repetition_penalty", "suppress_tokens"), "cpu", "sample") is None
    ref, p = _run("bart", "cpu", "greedy", ("no_repeat_ngram_size",), ours=None)
    got, _ = _run("bart", "cpu", "greedy", ("no_repeat_ngram_size",), ours="hook")
    assert ref.sequences.tolist() == [[2, 7, 8, 9, 0, 2]] * 2  # off the trie: 0 follows [7, 8, 9]
    assert got.sequences.tolist() == [[2, 7, 8, 9, 2]] * 2
    assert generated_keywords(INDEX, ref.sequences, EOS, p).tolist() == [-1, -1]
    assert generated_keywords(INDEX, got.sequences, EOS, p).tolist() == [KWS.index([7, 8, 9])] * 2
    for mode in MODES:
        with pytest.raises(pytest.skip.Exception, match="drops the constraint"):
            test_each_setting_alone_equals_the_hook("no_repeat_ngram_size", "bart", mode, "cpu")
    test_each_setting_alone_equals_the_hook("repetition_penalty", "gpt2", "greedy", "cpu")
    test_masked_allowed_tokens_are_forced_as_the_hook_forces_them("hook", ("min_new_tokens",), [[5]], [5, 2])


# ---------------------------------------------------------------- the hook slot itself
def test_in_hook_position_refusals_and_restores_the_model() -> None:
    model = _model("gpt2", "cpu")
    proc = TrieLogitsProcessor(INDEX, EOS)
    with pytest.raises(InputError, match="processor: expected a TrieLogitsProcessor"):
        with in_hook_position(model, object()):  # type: ignore[arg-type]
            pass
    with pytest.raises(InputError, match="model: expected a transformers model"):
        with in_hook_position(object(), proc):
            pass
    with in_hook_position(model, proc):
        with pytest.raises(InputError, match="already inside"):
            with in_hook_position(model, proc):
                pass
        with pytest.raises(InputError, match="prefix_allowed_tokens_fn: not with in_hook_position"):
            model.generate(torch.tensor([[3]]), max_new_tokens=2, pad_token_id=0,
                           prefix_allowed_tokens_fn=DictTrie(KWS, 1))
    assert "_get_logits_processor" not in vars(model)


def test_in_hook_position_starts_a_new_prompt_at_every_generate() -> None:
    """Reuse without reset(): a second generate() whose prompt is as long as the first output is not taken
    for a continuation in the hook slot."""
    model = _model("gpt2", "cpu")
    proc = TrieLogitsProcessor(INDEX, EOS)
    kw = {"max_new_tokens": 3, "eos_token_id": EOS, "pad_token_id": 0, "do_sample": False}
    with in_hook_position(model, proc), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = model.generate(torch.tensor([[3, 4]]), **kw)
        second = model.generate(torch.cat([first[:, :-1], torch.tensor([[9]])], 1), **kw)
    ref = model.generate(torch.cat([first[:, :-1], torch.tensor([[9]])], 1),
                         prefix_allowed_tokens_fn=DictTrie(KWS, first.shape[1]), **kw)
    assert torch.equal(second, ref)


def test_a_length_that_cannot_fit_the_longest_keyword_warns_once() -> None:
    model = _model("gpt2", "cpu")
    with pytest.warns(UserWarning, match=r"max_new_tokens=3 leaves room for 3 generated tokens, but the longest "
                                         r"keyword has 6 tokens \(7 with EOS\)"):
        TrieLogitsProcessor(INDEX, EOS, max_new_tokens=3)
    proc = TrieLogitsProcessor(INDEX, EOS)
    kw = {"eos_token_id": EOS, "pad_token_id": 0}
    with warnings.catch_warnings(record=True) as seen, in_hook_position(model, proc):
        warnings.simplefilter("always")
        model.generate(torch.tensor([[3, 4]]), max_new_tokens=7, **kw)  # room: no warning
        model.generate(torch.tensor([[3, 4]]), max_new_tokens=4, **kw)
        model.generate(torch.tensor([[3, 4]]), max_new_tokens=4, **kw)
    ours = [str(w.message) for w in seen if "flashtrie.hf" in str(w.message)]
    assert ours == ["flashtrie.hf: max_length=6 after 2 input tokens leaves room for 4 generated tokens, but the "
                    "longest keyword has 6 tokens (7 with EOS): rows on a longer keyword end cut, without EOS"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrieLogitsProcessor(INDEX, EOS, max_new_tokens=7)
    with pytest.raises(InputError, match="max_new_tokens: expected an integer of at least 0"):
        TrieLogitsProcessor(INDEX, EOS, max_new_tokens=-1)
    with pytest.raises(InputError, match="num_beams: expected an integer of at least 1"):
        TrieLogitsProcessor(INDEX, EOS, num_beams=0)
    with pytest.raises(InputError, match="num_beams: 4 does not divide the 6 rows"):
        TrieLogitsProcessor(INDEX, EOS, num_beams=4)(torch.zeros(6, 1, dtype=torch.long), torch.zeros(6, V))


# ---------------------------------------------------------------- CPU and CUDA agree on the same inputs
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_allowed_entries_keep_their_bits_nan_payloads_included(device: str, dtype) -> None:
    """Signalling and quiet NaNs of every payload, at allowed tokens, come back bit for bit."""
    bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}[dtype]
    gen = torch.Generator().manual_seed(0)
    raw = torch.randint(-(2**15), 2**15, (4, V), generator=gen, dtype=torch.int64).to(bits)
    nan = torch.tensor(float("nan"), dtype=dtype).view(bits)
    exp_bits = {torch.float16: 0x7C00, torch.bfloat16: 0x7F80, torch.float32: 0x7F800000,
                torch.float64: 0x7FF0000000000000}[dtype]
    raw[:, 5::4] = exp_bits | 1  # signalling NaNs (payload 1)
    raw[:, 7::4] = nan | 3
    raw[:, 10::2] = -(exp_bits | 5)  # negative NaNs (sign set)
    for inplace in (True, False):
        scores = raw.view(dtype).to(device)
        ids = torch.tensor([[3, 5], [3, 7], [3, 10], [3, 40]], device=device)
        out = TrieLogitsProcessor(INDEX, EOS, prompt_length=1, inplace=inplace)(ids, scores.clone())
        allowed = torch.zeros(4, V, dtype=torch.bool)
        for r, toks in enumerate([[5, 6, EOS], [8], [11], [EOS]]):
            allowed[r, toks] = True
        got = out.cpu().view(bits)
        assert torch.equal(got[allowed], raw[allowed])
        assert torch.isneginf(out.cpu()[~allowed]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_input_ids_are_accepted(device: str) -> None:
    ids = torch.tensor([[3, 5, 9], [3, 7, 9], [3, 10, 9]], device=device)
    strided = ids.t().contiguous().t()  # column stride 3
    assert strided.stride(1) != 1
    for i in (strided, ids[:, ::2][:, :1].expand(3, 2)):
        a = TrieLogitsProcessor(INDEX, EOS, prompt_length=1)(i, torch.zeros(3, V, device=device))
        b = TrieLogitsProcessor(INDEX, EOS, prompt_length=1)(i.contiguous(), torch.zeros(3, V, device=device))
        assert torch.equal(a, b)


class _Recorded(TrieLogitsProcessor):
    """A processor that keeps every call's inputs and output (the hook slot and logits_processor= alike)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple] = []

    def _process(self, input_ids, scores, group, lowest=False):
        before = scores.clone()
        out = super()._process(input_ids, scores, group, lowest)
        self.calls.append((input_ids.clone(), before, group, lowest, out.clone()))
        return out


_BIT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
             torch.float64: torch.int64}
ON_DEVICE = [pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                              reason="needs CUDA")])]
CROSS = [(n,) for n in ALL if n not in WARPERS] + [
    ("min_new_tokens", "no_repeat_ngram_size"), ("bad_words_ids", "repetition_penalty", "sequence_bias"),
    ("forced_eos_token_id", "min_length", "suppress_tokens"),
    ("begin_suppress_tokens", "encoder_no_repeat_ngram_size", "renormalize_logits"),
    ("exponential_decay_length_penalty", "no_repeat_ngram_size", "remove_invalid_values")]


@pytest.mark.parametrize("device", ON_DEVICE)
@pytest.mark.parametrize("position", ["hook", "list"])
@pytest.mark.parametrize("mode", ["greedy", "beams"])
@pytest.mark.parametrize("arch", ["gpt2", "bart"])
@pytest.mark.parametrize("names", CROSS, ids="+".join)
def test_the_processor_on_cuda_equals_the_processor_on_the_cpu(names, arch: str, mode: str, position: str,
                                                               device: str) -> None:
    """Whatever the installed hook does: the same weights on the CPU and on the device, the processor in each
    position (greedy and beam search: no sampling RNG).  Every call of the device run, replayed on the CPU,
    gives the same bits; greedy runs give the same sequences, -inf and NaN at the same entries, the other scores
    equal up to the rounding of the model's arithmetic on each device; in logits_processor= (rows forced one
    by one) every row spells the trie and no score row is all -inf."""
    runs = {}
    for dev in ("cpu", device):
        proc = _Recorded(INDEX, EOS, backend="numpy" if dev == "cpu" else "gpu")
        out, p = _run(arch, dev, mode, names, ours=position, grouped=False, proc=proc)
        runs[dev] = out, proc
    (host, _), (dev_out, dev_proc) = runs["cpu"], runs[device]
    replay = TrieLogitsProcessor(INDEX, EOS, backend="numpy")
    assert dev_proc.calls and dev_proc._gpu and None not in dev_proc._gpu.values()  # the GPU stepper masked
    for ids, before, group, lowest, after in dev_proc.calls:
        assert after.device.type == "cuda"
        want = replay._process(ids.cpu(), before.cpu(), group, lowest)
        assert torch.equal(after.cpu().view(_BIT_VIEW[want.dtype]), want.view(_BIT_VIEW[want.dtype]))
    # End to end, greedy only: beam search ranks near-ties by the model's own float arithmetic, which differs
    # between the devices (beam scores apart by 1e-3), and orders hypotheses of -inf score by the device's top-k
    # ties; the processor's part of it is the bits checked above.
    if "watermarking_config" not in names and mode == "greedy":  # (watermarking: the device's own RNG)
        assert torch.equal(dev_out.sequences.cpu(), host.sequences), (dev_out.sequences.tolist(),
                                                                       host.sequences.tolist())
        for x, y in zip(dev_out.scores, host.scores, strict=True):
            x = x.cpu()
            assert torch.equal(torch.isneginf(x), torch.isneginf(y)) and torch.equal(x.isnan(), y.isnan())
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4, equal_nan=True)
    if position == "list":
        for out in (host, dev_out):
            _some_row_finite(out, mode, False)
            _on_trie(out, p)
            spelled = generated_keywords(INDEX, out.sequences, EOS, p).tolist()
            for row, k in zip(out.sequences.tolist(), spelled, strict=True):
                gen = row[p:]
                assert (k >= 0) == (EOS in gen) and (k < 0 or KWS[k] == gen[: gen.index(EOS)]), (gen, k)


# ---------------------------------------------------------------- reusing one processor without reset()
def test_the_reuse_rule_is_the_documented_one() -> None:
    """In logits_processor=, a call continues the inferred prompt exactly when it has the rows of the
    call that inferred it and is one token longer than the last call, or holds the same prompt tokens."""
    proc = TrieLogitsProcessor(INDEX, EOS)

    def allowed(ids: list[list[int]]) -> list[list[int]]:
        out = proc(torch.tensor(ids), torch.zeros(len(ids), V))
        return [torch.isfinite(r).nonzero().flatten().tolist() for r in out]

    root = [5, 7, 10, 20, 30]
    model = _model("gpt2", "cpu")
    with torch.no_grad():
        first = model.generate(torch.tensor([[3, 4]]), max_new_tokens=3, do_sample=False, eos_token_id=EOS,
                               pad_token_id=0, logits_processor=LogitsProcessorList([proc]))
    assert first.shape[1] == proc._last_len + 1  # greedy: the output is one token longer than the last call
    # a new prompt as long as that output: one token longer than the last call, taken for a continuation
    as_long = [[9] * first.shape[1]]
    assert allowed(as_long) != [root]
    proc.reset()
    assert allowed(as_long) == [root]
    # a new prompt neither one token longer nor beginning with the prompt starts again
    assert allowed([[8] * (first.shape[1] + 3)]) == [root]
    # ... but one beginning with the inferred prompt is taken for a continuation (assisted decoding's rule)
    assert allowed([[8] * (first.shape[1] + 3) + [5, 5, 5]]) == [[EOS]]
