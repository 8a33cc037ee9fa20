"""Drafting from Python: the n-gram drafter looks up the prompt, the tree
builders draft from any drafter (the n-gram one or a Python object) and
compose with the rules losslessly, Sequoia's shapes respect their budget, and
the length policies adapt as their papers say."""
import numpy as np
import pytest

import specdec
from specdec import testing as T

VOCAB, PROMPT = 5, [1, 2]
TARGET, DRAFT = T.MarkovModel(VOCAB, 1), T.MarkovModel(VOCAB, 1, noise=0.7)


class MarkovDrafter:
    """A Python drafter (the Drafter protocol): a MarkovModel's warped rows for
    the context plus each frontier slot's path."""

    vocab_size = VOCAB

    def __init__(self, model):
        self.model, self.context, self.sampling = model, [], None

    def begin(self, tokens, sampling):
        self.context, self.sampling = list(tokens), sampling

    def propose(self, tree, frontier):
        return np.stack([specdec.warp(self.model.logits(self.context + path_tokens(tree, s)), self.sampling)
                         for s in frontier])

    def commit(self, tokens):
        self.context += list(tokens)

    def end(self):
        self.context = []


def path_tokens(tree, slot):
    return [] if slot == -1 else [tree.tokens[i] for i in tree.path_to(slot)]


def test_the_ngram_drafter_continues_the_last_match():
    d = specdec.NgramDrafter(10, min_ngram=1, max_ngram=3)
    d.begin([1, 2, 3, 4, 1, 2, 3])
    tree, rows = specdec.ChainBuilder(specdec.ChainPick.TOP1).build(d, specdec.DraftBudget(4, 4), 3,
                                                                    specdec.RandomStream(0))
    assert tree.tokens == [4, 1, 2, 3] and tree.parents == [-1, 0, 1, 2]
    assert rows.shape == (4, 10) and (rows.argmax(1) == [4, 1, 2, 3]).all() and (rows.sum(1) == 1).all()
    d.commit([4, 9])  # after 9 nothing matches: no proposal, an empty tree
    assert len(specdec.ChainBuilder().build(d, specdec.DraftBudget(4, 4), 9, specdec.RandomStream(0))[0]) == 0


def test_builders_draft_from_a_python_drafter():
    d = MarkovDrafter(DRAFT)
    d.begin(PROMPT, specdec.SamplingParams(0.0))
    tree, rows = specdec.ChainBuilder().build(d, specdec.DraftBudget(3, 3), PROMPT[-1], specdec.RandomStream(0))
    context = list(PROMPT)
    for token in tree.tokens:  # a greedy request's chain follows the draft's argmax
        assert token == int(np.argmax(DRAFT.logits(context)))
        context.append(token)
    d.begin(PROMPT, specdec.SamplingParams(1.0))  # (a greedy request's rows are one-hot: no second child)
    tree, rows = specdec.StaticTreeBuilder([[0], [1], [0, 0], [0, 1]]).build(
        d, specdec.DraftBudget(2, 4), PROMPT[-1], specdec.RandomStream(0))
    assert tree.parents == [-1, -1, 0, 0] and len(set(tree.tokens[:2])) == 2 and rows.shape == (2, VOCAB)
    tree, _ = specdec.DynamicTreeBuilder(top_k=2, depth=3, total_tokens=5).build(
        d, specdec.DraftBudget(3, 20, 5), PROMPT[-1], specdec.RandomStream(0))
    assert len(tree) == 5
    tree, _ = specdec.MultiSequenceBuilder(sequences=2).build(d, specdec.DraftBudget(4, 4), PROMPT[-1],
                                                             specdec.RandomStream(0))
    assert len(tree) == 4 and tree.parents.count(-1) == 2  # two sequences of two


def test_a_python_drafter_with_wrong_rows_is_refused():
    class Wrong(MarkovDrafter):
        def propose(self, tree, frontier):
            return np.zeros((len(frontier), VOCAB + 1), np.float32)

    d = Wrong(DRAFT)
    d.begin(PROMPT, specdec.SamplingParams())
    with pytest.raises(specdec.ShapeError, match=r"returned \[1, 6\] rows for 1 slots of vocabulary 5"):
        specdec.ChainBuilder().build(d, specdec.DraftBudget(2, 2), 2, specdec.RandomStream(0))
    with pytest.raises(specdec.InvalidArgumentError, match=r"needs the method begin\(\)"):
        specdec.ChainBuilder().build(object(), specdec.DraftBudget(2, 2), 2, specdec.RandomStream(0))


@pytest.mark.parametrize("builder,rule", [
    (specdec.ChainBuilder(specdec.ChainPick.SAMPLE), specdec.SpeculativeSampling()),
    (specdec.StaticTreeBuilder([[0], [1], [0, 0]], specdec.ChildMode.SAMPLED_WITHOUT_REPLACEMENT),
     specdec.RecursiveRejectionSampling()),
    (specdec.DynamicTreeBuilder(top_k=2, depth=2, total_tokens=4), specdec.TraversalVerification()),
], ids=["chain-speculative", "sequoia-style-rrs", "dynamic-traversal"])
def test_built_trees_verified_by_a_rule_keep_the_target_law(builder, rule):
    sampling, draws = specdec.SamplingParams(1.0), 20000
    law = T.law_of(TARGET, PROMPT, 2, sampling)
    assert T.power(law, draws, shift=0.03) >= 0.9
    outs = []
    drafter = MarkovDrafter(DRAFT)
    for i in range(draws):
        rng, out = specdec.RandomStream(7, i), []
        drafter.begin(PROMPT, sampling)
        while len(out) < 2:
            root = (PROMPT + out)[-1]
            tree, rows = builder.build(drafter, specdec.DraftBudget(2, 4), root, rng)
            context = PROMPT + out
            target = np.stack([specdec.warp(TARGET.logits(context + path_tokens(tree, s)), sampling)
                               for s in range(-1, len(tree))])
            emitted = rule.verify(tree, target, rows, rng).emitted_tokens(tree)
            drafter.commit(emitted)
            out += emitted
        outs.append(out)
    T.assert_lossless(T.counts_of(outs, VOCAB, 2), law)


def test_sequoia_shapes_fit_their_budget():
    assert specdec.sequoia_choices([1.0], 3, 5) == [[0], [0, 0], [0, 0, 0]]  # always the first child: a chain
    wide = specdec.sequoia_choices([0.4, 0.3, 0.2], 6, 2)
    assert len(wide) <= 6 and max(len(c) for c in wide) <= 2 and [1] in wide and [2] in wide
    with pytest.raises(specdec.InvalidArgumentError):
        specdec.sequoia_choices([0.7, -0.1], 4, 2)  # not a probability


def test_length_policies_adapt():
    h = specdec.HeuristicLength(initial_k=5, max_k=8)
    h.observe(num_drafted=5, num_accepted=5)
    assert h.budget().max_depth == 7  # + 2 after a fully accepted chain
    h.observe(num_drafted=7, num_accepted=2)
    assert h.budget().max_depth == 6  # - 1 otherwise
    f = specdec.FollowVerified(max_length=6)
    f.observe(num_drafted=6, num_accepted=1, num_verified=2)
    assert f.budget().max_nodes == 3
    c = specdec.ConfidenceStop(specdec.DraftBudget(8, 8), threshold=0.3)
    assert c.budget().stop_below == pytest.approx(0.3)
    assert specdec.FixedLength(specdec.DraftBudget(3, 9, 6)).budget().verify_nodes == 6
    with pytest.raises(specdec.InvalidArgumentError, match="num_accepted <= num_drafted"):
        h.observe(num_drafted=2, num_accepted=3)


def test_cost_aware_tree_replans_from_observed_rounds():
    """Where only a node's first child is ever accepted and verification costs
    the same for 1 to 16 tokens, the best plan is a deep chain."""
    initial = specdec.DraftBudget(max_depth=4, max_nodes=12, verify_nodes=12, branch=3)
    policy = specdec.CostAwareTree([1, 2, 4, 8, 16], [0.01] * 5, initial, min_rounds=4, replan_every=4)
    tree = specdec.DraftTree.from_parents(0, [1, 2, 3, 4, 5, 6], [-1, -1, 0, 0, 2, 2], [0.5] * 6)
    for _ in range(8):
        policy.observe(num_drafted=6, num_accepted=2, draft_us=100.0, tree=tree, accepted_nodes=[0, 2])
    plan = policy.budget()
    assert plan.max_depth <= initial.max_depth and plan.verify_nodes <= initial.verify_nodes
    assert plan.branch == 1 and plan.verify_nodes == plan.max_depth  # a chain: one node per level


def test_suffix_decoding_drafts_from_earlier_outputs():
    cache = specdec.SuffixCache(max_depth=24, max_cached=8)
    earlier = specdec.SuffixDrafter(20, cache, max_depth=24, factor=2.0)
    earlier.begin([0])
    earlier.commit([10, 11, 12, 13, 14, 15])
    earlier.end()
    assert cache.num_tokens == 6 and cache.bytes > 0
    d = specdec.SuffixDrafter(20, cache, max_depth=24, factor=2.0)
    d.begin([3, 4, 10, 11])
    s = d.speculate(8)
    assert s["tokens"] == [12, 13, 14, 15] and s["match_len"] == 2 and s["score"] == pytest.approx(4.0)
    tree, rows = specdec.SuffixTreeBuilder().build(d, specdec.DraftBudget(3, 8), 11, specdec.RandomStream(0))
    assert tree.tokens == [12, 13, 14] and tree.children_mode(-1) == specdec.ChildMode.DETERMINISTIC
    assert rows.shape == (0, 20)
    with pytest.raises(specdec.InvalidArgumentError, match="must be a SuffixDrafter"):
        specdec.SuffixTreeBuilder().build(specdec.NgramDrafter(20), specdec.DraftBudget(), 11, specdec.RandomStream(0))
