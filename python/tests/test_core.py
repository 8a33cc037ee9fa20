"""The building blocks: sampling parameters, the warp, random streams, trees,
typed errors."""
import numpy as np
import pytest

import specdec


def test_sampling_params_validate_with_typed_errors():
    s = specdec.SamplingParams(temperature=0.7, top_k=3, top_p=0.9, seed=5)
    assert (s.temperature, s.top_k, s.seed) == (pytest.approx(0.7), 3, 5)
    assert not s.is_greedy and specdec.SamplingParams(temperature=0).is_greedy
    for bad in (dict(temperature=-1.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(specdec.InvalidArgumentError):
            specdec.SamplingParams(**bad)
    assert issubclass(specdec.InvalidArgumentError, specdec.Error)


def test_warp_is_the_softmax_with_temperature_top_k_and_top_p():
    logits = np.array([2.0, 1.0, 0.5, -1.0, 0.0], dtype=np.float32)
    got = specdec.warp(logits, specdec.SamplingParams(temperature=0.5))
    want = np.exp(logits / 0.5 - np.max(logits / 0.5))
    np.testing.assert_allclose(got, want / want.sum(), rtol=1e-5)
    greedy = specdec.warp(logits, specdec.SamplingParams(temperature=0))
    assert list(greedy) == [1, 0, 0, 0, 0]
    top2 = specdec.warp(logits, specdec.SamplingParams(top_k=2))
    assert np.count_nonzero(top2) == 2 and top2[0] > top2[1] > 0
    rows = specdec.warp(np.stack([logits, logits[::-1].copy()]), specdec.SamplingParams())
    assert rows.shape == (2, 5)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(logits == np.array([2.0, 1.0, 0.5, -1.0, 0.0], dtype=np.float32))  # input untouched


def test_warp_refuses_nan_and_all_masked_rows():
    with pytest.raises(specdec.InvalidDistributionError, match="nan"):
        specdec.warp(np.array([0.0, np.nan], dtype=np.float32), specdec.SamplingParams())
    with pytest.raises(specdec.InvalidDistributionError):
        specdec.warp(np.full(3, -np.inf, dtype=np.float32), specdec.SamplingParams())
    with pytest.raises(specdec.ShapeError):
        specdec.warp(np.zeros((2, 2, 2), dtype=np.float32), specdec.SamplingParams())


def test_random_streams_are_counter_based():
    a, b = specdec.RandomStream(seed=3, stream=1), specdec.RandomStream(seed=3, stream=1)
    draws = [a.uniform() for _ in range(5)]
    assert draws == [b.uniform() for _ in range(5)]
    assert all(0.0 <= u < 1.0 for u in draws)
    resumed = specdec.RandomStream(seed=3, stream=1, offset=2)
    assert resumed.uniform() == draws[2] and a.offset == 5
    assert specdec.RandomStream(seed=3, stream=2).uniform() != draws[0]
    counts = np.bincount([specdec.RandomStream(9, i).sample(np.array([1, 0, 3], np.float32)) for i in range(4000)],
                         minlength=3)
    assert counts[1] == 0 and 0.2 < counts[0] / 4000 < 0.3
    with pytest.raises(specdec.InvalidDistributionError):
        a.sample(np.zeros(3, np.float32))


def test_draft_trees_from_parents_and_chains():
    tree = specdec.DraftTree.from_parents(9, tokens=[1, 2, 3, 4], parents=[-1, -1, 0, 0], draft_probs=[.5, .3, .2, .1])
    tree.set_children_source(-1, 0, specdec.ChildMode.SAMPLED_WITH_REPLACEMENT)
    tree.set_children_source(0, 1, specdec.ChildMode.DETERMINISTIC)
    assert len(tree) == 4 and tree.root_token == 9 and not tree.is_chain
    assert tree.tokens == [1, 2, 3, 4] and tree.parents == [-1, -1, 0, 0] and tree.depths == [1, 1, 2, 2]
    assert tree.children(-1) == [0, 1] and tree.children(0) == [2, 3]
    assert tree.children_mode(0) == specdec.ChildMode.DETERMINISTIC and tree.children_draft_row(0) == 1
    assert sorted(tree.leaf_paths()) == [[0, 2], [0, 3], [1]]
    mask = tree.ancestor_mask()
    assert mask.shape == (5, 5) and mask[3, 1] and mask[3, 0] and not mask[3, 2]
    chain = specdec.DraftTree.chain(0, [4, 5, 6])
    assert chain.is_chain and [chain.children_draft_row(s) for s in (-1, 0, 1)] == [0, 1, 2]
    with pytest.raises(specdec.InvalidTreeError):
        specdec.DraftTree.from_parents(0, [1, 2], [-1, 1])  # a parent after its child
    with pytest.raises(specdec.ShapeError):
        specdec.DraftTree.from_parents(0, [1, 2], [-1])
