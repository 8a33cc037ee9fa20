"""A Model written in PyTorch (specdec.torch_llama.TorchLlama: a Llama with a
KV cache, tree masks and rollback) under the engine, as target and draft:
every method decodes greedily as autoregressive decoding does, and every
draft-model method keeps the target's law when sampling (chi-square, with a
power check and a must-fail variant)."""
import numpy as np
import pytest

pytest.importorskip("torch")
import specdec  # noqa: E402
from specdec import testing as T  # noqa: E402
from specdec.torch_llama import TorchLlama  # noqa: E402

PROMPT = [1, 2, 3]


def runnable():
    needs = {"sequoia": "sequoia:p=0.6,0.2,0.1,0.1:total=8:depth=4"}
    return [needs.get(m["name"], m["name"]) for m in specdec.methods() if m["name"] not in ("magicdec", "sv", "slem", "tli")]


@pytest.fixture(scope="module")
def greedy_pair():
    target, draft = TorchLlama(seed=0), TorchLlama(seed=0, perturb=0.3)
    context = list(PROMPT)
    for _ in range(24):
        context.append(int(np.argmax(target.logits(context))))
    return target, draft, context[len(PROMPT):]


@pytest.mark.parametrize("name", runnable())
def test_every_method_over_torch_models_decodes_greedily_as_autoregressive_decoding(greedy_pair, name):
    target, draft, want = greedy_pair
    result = specdec.method(name, target, draft).generate(PROMPT, max_new_tokens=24)
    assert result.tokens == want
    assert target.sequences == {} and draft.sequences == {}  # every sequence closed


# Small enough for a chi-square on the first two tokens (16 outcomes).
def sampled_pair():
    shape = dict(vocab_size=4, hidden_size=16, layers=1, heads=2, seed=0, sharpness=1.5)
    return TorchLlama(**shape), TorchLlama(**shape, perturb=0.5)


SAMPLING, DRAWS = specdec.SamplingParams(1.0), 2000


def decode_counts(name, target, draft):
    decoder = specdec.method(name, target, draft, SAMPLING)
    sampling = specdec.SamplingParams(1.0, seed=3)
    decodes = (decoder.generate(PROMPT[:2], max_new_tokens=2, sampling=sampling, request_id=i).tokens
               for i in range(DRAWS))
    return T.counts_of(decodes, 4, 2)


def test_the_test_has_power():
    target, _ = sampled_pair()
    assert T.power(T.law_of(target, PROMPT[:2], 2, SAMPLING), DRAWS, shift=0.05) >= 0.9


@pytest.mark.parametrize("name", ["chain:k=3", "tree:draw=sample", "dynamic", "sequoia:p=0.6,0.2,0.1,0.1:total=8:depth=4",
                                  "duo"])
def test_draft_model_methods_over_torch_models_keep_the_target_law(name):
    target, draft = sampled_pair()
    T.assert_lossless(decode_counts(name, target, draft), T.law_of(target, PROMPT[:2], 2, SAMPLING))


def test_the_must_fail_variant_is_caught():
    """Decoding the draft alone (a wrong "method": it samples the draft's law)
    is rejected by the same test."""
    target, draft = sampled_pair()
    T.assert_rejected(decode_counts("autoregressive", draft, None), T.law_of(target, PROMPT[:2], 2, SAMPLING))
