"""The libtorch models from Python (specdec.load): the default models in
models/, every registered method by name, greedy outputs equal to
autoregressive decoding, and the tokenizer."""
import os

import pytest

import specdec

SOURCE = os.environ.get("SPECDEC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(SOURCE, "models")
pytestmark = pytest.mark.skipif(not hasattr(specdec, "load"), reason="built without the libtorch backend")


@pytest.fixture(scope="module")
def setup():
    tok = specdec.Tokenizer.load(os.path.join(MODELS, "target", "tokenizer.model"))
    target = specdec.load(os.path.join(MODELS, "target"), "bf16")
    draft = specdec.load(os.path.join(MODELS, "draft"), "bf16")
    return tok, target, draft


def test_the_tokenizer_round_trips(setup):
    tok, target, _ = setup
    ids = tok.encode("And God said unto Moses")
    assert ids[0] == tok.bos_id and tok.decode(ids[1:]) == "And God said unto Moses"
    assert tok.vocab_size == target.vocab_size


@pytest.mark.parametrize("spec", ["chain:k=4", "tree", "lyanna", "eagle", "eagle3", "spire", "duo"])
def test_registered_methods_on_the_default_models_decode_greedily_as_autoregressive(setup, spec):
    tok, target, draft = setup
    prompt = tok.encode("In the beginning God created")
    want = specdec.method("autoregressive", target).generate(prompt, max_new_tokens=24).tokens
    got = specdec.method(spec, target, draft, dir=MODELS).generate(prompt, max_new_tokens=24)
    assert got.tokens == want and len(want) == 24


def test_a_python_draft_with_a_libtorch_target_is_refused(setup):
    _, target, _ = setup
    with pytest.raises(specdec.InvalidArgumentError, match="libtorch draft"):
        specdec.method("chain:k=4", target, object())
