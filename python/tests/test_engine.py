"""The engine from Python: the standard methods over a model written in
Python, driven step by step; greedy outputs equal greedy decoding, sampled
ones keep the target's law, and the same seeds give the C++ engine's tokens."""
import numpy as np
import pytest

import specdec
from specdec import testing as T
from specdec.models import MarkovLM

VOCAB, PROMPT = 5, [1, 2]


def models():
    return MarkovLM(T.MarkovModel(VOCAB, 1)), MarkovLM(T.MarkovModel(VOCAB, 1, noise=0.7))


def greedy_continuation(n):
    m, context = T.MarkovModel(VOCAB, 1), list(PROMPT)
    for _ in range(n):
        context.append(int(np.argmax(m.logits(context))))
    return context[len(PROMPT):]


def runnable():
    """The methods a pair of Python models can run (not MagicDec's sparse cache,
    nor SV, which reads a companion model and profiles from files, nor slem and
    tli, which load a draft and two tokenizers from files), with the options
    they cannot do without."""
    needs = {"sequoia": "sequoia:p=0.6,0.2,0.1,0.1:total=8:depth=4"}
    return [needs.get(m["name"], m["name"]) for m in specdec.methods() if m["name"] not in ("magicdec", "sv", "slem", "tli")]


def test_the_methods_are_listed_with_their_parameters():
    names = [m["name"] for m in specdec.methods()]
    assert names[:2] == ["autoregressive", "chain"] and "duo" in names and "sv" in names
    chain = next(m for m in specdec.methods() if m["name"] == "chain")
    assert any(p["key"] == "k" and p["type"] == "int" for p in chain["params"]) and "2211.17192" in chain["papers"]


@pytest.mark.parametrize("name", runnable())
def test_every_method_decodes_greedily_as_autoregressive_decoding(name):
    target, draft = models()
    decoder = specdec.method(name, target, draft)
    result = decoder.generate(PROMPT, max_new_tokens=20)
    assert result.tokens == greedy_continuation(20) and result.stop_reason == "max_new_tokens"
    assert target.sequences == {} and draft.sequences == {}  # every sequence closed


def test_methods_a_python_model_cannot_run_say_why():
    target, draft = models()
    with pytest.raises(specdec.UnsupportedError, match="dense cache"):
        specdec.method("magicdec", target).generate(PROMPT, max_new_tokens=4)
    with pytest.raises(specdec.InvalidArgumentError, match="needs a draft model"):
        specdec.method("chain:k=3", target)
    with pytest.raises(specdec.InvalidArgumentError, match="load_vocabulary"):
        specdec.method("slem", target)
    with pytest.raises(specdec.InvalidArgumentError, match=r"needs the method open\(\)"):
        specdec.method("autoregressive", object())


def test_a_host_scheduler_steps_begins_and_aborts():
    target, draft = models()
    decoder = specdec.method("chain:k=3", target, draft)
    streamed = []
    decoder.begin(0, PROMPT, max_new_tokens=12, on_token=streamed.append)
    decoder.begin(1, [3, 4, 0], max_new_tokens=40)
    steps = 0
    while not decoder.done(0):
        decoder.step()
        steps += 1
    assert decoder.result(0).tokens == greedy_continuation(12) == streamed
    assert steps < 12 and decoder.requests == [0, 1]
    decoder.abort(1)
    aborted = decoder.take_result(1)
    assert aborted.stop_reason == "cancelled" and 0 < len(aborted.tokens) < 40
    assert decoder.take_result(0).tau > 1.0 and decoder.requests == []


# "tree": its default children follow the request (drawn without replacement here, at T = 1).
@pytest.mark.parametrize("name", ["chain:k=3", "tree", "dynamic", "duo"])
def test_sampled_methods_keep_the_target_law(name):
    target, draft = models()
    decoder = specdec.method(name, target, draft, specdec.SamplingParams(1.0))
    sampling, draws = specdec.SamplingParams(1.0, seed=3), 8000
    decodes = (decoder.generate(PROMPT, max_new_tokens=2, sampling=sampling, request_id=i).tokens for i in range(draws))
    T.assert_lossless(T.counts_of(decodes, VOCAB, 2), T.law_of(T.MarkovModel(VOCAB, 1), PROMPT, 2, sampling))


# The C++ engine's tokens for this request (tests/unit/engine/method_registry_test.cpp,
# "The registry's chain at T = 1 emits the tokens the Python package checks"): the
# same registry over the C++ model.
CPP_CHAIN_T1_SEED5 = [0, 0, 4, 2, 0, 4, 2, 1, 0, 4, 2, 1, 2, 1, 3, 1]


def test_the_same_seeds_give_the_cpp_engines_tokens():
    target, draft = models()
    decoder = specdec.method("chain:k=3", target, draft, specdec.SamplingParams(1.0))
    tokens = decoder.generate(PROMPT, max_new_tokens=16, sampling=specdec.SamplingParams(1.0, seed=5), request_id=7).tokens
    assert tokens == CPP_CHAIN_T1_SEED5
