"""Every rule from Python, tested the way the C++ suite tests it: the first two
tokens of many seeded decodes against the target's exact law (chi-square),
with a power check and must-fail variants."""
import numpy as np
import pytest

import specdec
from specdec import testing as T

VOCAB, PROMPT, DRAWS = 5, [1, 2], 60000
TARGET = T.MarkovModel(VOCAB, 1)
DRAFT = T.MarkovModel(VOCAB, 1, noise=0.7)  # a correlated, imperfect draft
SETTINGS = [specdec.SamplingParams(), specdec.SamplingParams(temperature=0.7, top_k=3)]


def counts(rule, sampling, shape, seed=11, draws=DRAWS):
    decodes = (T.speculative_decode(rule, TARGET, DRAFT, PROMPT, 2, sampling, specdec.RandomStream(seed, i), shape=shape)
               for i in range(draws))
    return T.counts_of(decodes, VOCAB, 2)


def test_the_test_has_power():
    for sampling in SETTINGS:
        # a rule that moves 1.5% of the probability is caught at least 9 times in 10
        assert T.power(T.law_of(TARGET, PROMPT, 2, sampling), DRAWS, shift=0.015) >= 0.9


@pytest.mark.parametrize("sampling", SETTINGS, ids=["t1", "t0.7-top3"])
@pytest.mark.parametrize("rule,shape", [
    (specdec.SpeculativeSampling(), "chain"),
    (specdec.BlockVerification(), "chain"),
    (specdec.RecursiveRejectionSampling(), "chain"),
    (specdec.RecursiveRejectionSampling(), "tree"),
    (specdec.TraversalVerification(), "tree"),
], ids=["speculative-chain", "block-chain", "rrs-chain", "rrs-tree", "traversal-tree"])
def test_lossless_rules_keep_the_target_law(rule, shape, sampling):
    assert type(rule).lossless
    T.assert_lossless(counts(rule, sampling, shape), T.law_of(TARGET, PROMPT, 2, sampling))


def test_typical_acceptance_is_lossy_and_caught():
    assert not specdec.TypicalAcceptance.lossless
    T.assert_rejected(counts(specdec.TypicalAcceptance(), SETTINGS[0], "chain"), T.law_of(TARGET, PROMPT, 2, SETTINGS[0]))


class AcceptEverything:
    """A wrong rule of one's own: keeps every drafted token, so the output follows
    the draft, not the target. The kit must catch it."""

    def verify(self, tree, target, draft, rng):
        class Result:
            def emitted_tokens(self, t):
                return t.tokens + [rng.sample(target[-1])]
        return Result()


def test_a_broken_rule_of_ones_own_is_caught():
    T.assert_rejected(counts(AcceptEverything(), SETTINGS[0], "chain", draws=20000),
                      T.law_of(TARGET, PROMPT, 2, SETTINGS[0]))
    with pytest.raises(AssertionError, match="do not follow"):
        T.assert_lossless(counts(AcceptEverything(), SETTINGS[0], "chain", draws=20000),
                          T.law_of(TARGET, PROMPT, 2, SETTINGS[0]))


def test_greedy_acceptance_emits_greedy_decoding():
    greedy = specdec.SamplingParams(temperature=0)
    assert specdec.GreedyAcceptance.greedy_only
    context = list(PROMPT)
    for _ in range(6):
        context.append(int(np.argmax(TARGET.logits(context))))
    for seed in range(5):
        out = T.speculative_decode(specdec.GreedyAcceptance(), TARGET, DRAFT, PROMPT, 6, greedy,
                                   specdec.RandomStream(seed), k=3)
        assert out[:6] == context[2:]


def test_rules_refuse_rows_that_do_not_fit_the_tree(p_q):
    p, q = p_q
    tree = specdec.DraftTree.chain(0, [2, 3])
    rng = specdec.RandomStream(1)
    with pytest.raises(specdec.ShapeError, match="target has 2 rows, expected 3"):
        specdec.SpeculativeSampling().verify(tree, np.stack([p, p]), np.stack([q, q]), rng)
    with pytest.raises(specdec.ShapeError):
        specdec.RecursiveRejectionSampling().verify(tree, np.stack([p, p, p]), q[:3][None], rng)


def test_float64_and_strided_rows_are_converted_float32_rows_are_read_in_place(p_q):
    p, q = p_q
    tree = specdec.DraftTree.chain(0, [4], [float(q[4])])
    rows32 = np.stack([p, p])
    a = specdec.SpeculativeSampling().verify(tree, rows32, q[None], specdec.RandomStream(5))
    b = specdec.SpeculativeSampling().verify(tree, rows32.astype(np.float64), np.stack([q, q])[:1], specdec.RandomStream(5))
    assert a.emitted_tokens(tree) == b.emitted_tokens(tree)
