"""The statistical harness of specdec's losslessness tests, for your own rules
and compositions (docs/python.md, "Testing a rule of your own").

A speculative decoder is lossless when the tokens it emits follow the
target's warped law exactly. To test one: compute that law for the first few
tokens of a small model (exact_law), decode many times with fixed seeds and
count the outcomes, and check the counts with Pearson's chi-square
(assert_lossless). Two checks make such a test mean something: that it has
the power to see a deviation of the size you care about (power), and that it
rejects a rule known to be wrong (assert_rejected on a must-fail variant).

The chi-square test, the exact law and MarkovModel are the C++ suite's own.
"""
import numpy as np

from ._specdec.testing import ChiSquareResult, MarkovModel, chi_square_gof, exact_law  # noqa: F401

__all__ = ["ChiSquareResult", "MarkovModel", "chi_square_gof", "exact_law", "law_of", "counts_of",
           "assert_lossless", "assert_rejected", "power"]


def law_of(model, prompt, n, sampling):
    """The exact law of the first n tokens a lossless decoder emits after `prompt`
    from `model` (a MarkovModel, or any object with vocab_size and logits(context)),
    warped by `sampling`: an array of shape [vocab] * n."""
    return exact_law(model.logits, list(prompt), n, model.vocab_size, sampling)


def counts_of(samples, vocab, n):
    """Counts of n-token outcomes (sequences of at least n tokens; the first n are
    counted), shaped [vocab] * n like exact_law's law."""
    counts = np.zeros((vocab,) * n, dtype=np.int64)
    for s in samples:
        if len(s) < n:
            raise ValueError(f"a sample has {len(s)} tokens, fewer than the {n} counted")
        counts[tuple(s[:n])] += 1
    return counts


def assert_lossless(counts, law, alpha=1e-3):
    """Raises AssertionError when the counts do not fit the law at level alpha
    (or hold an outcome the law calls impossible). Returns the ChiSquareResult."""
    result = chi_square_gof(np.ravel(counts), np.ravel(law))
    if result.rejects(alpha):
        raise AssertionError(f"the counts do not follow the law: {result!r}")
    return result


def assert_rejected(counts, law, alpha=1e-3):
    """The must-fail check: raises AssertionError when the counts of a rule known
    to be wrong are NOT rejected (the test has no power against it)."""
    result = chi_square_gof(np.ravel(counts), np.ravel(law))
    if not result.rejects(alpha):
        raise AssertionError(f"a wrong rule passed the test: {result!r}")
    return result


def power(law, draws, shift, alpha=1e-3, trials=200, seed=0):
    """How often the test rejects `draws` samples from a law `shift` away in total
    variation (that mass moved from the most to the second most probable
    outcome): the chance that a rule wrong by that much is caught. Asserting
    power(...) >= 0.9 before trusting a passing test is the suite's habit."""
    p = np.ravel(np.asarray(law, dtype=np.float64))
    if p.size < 2:
        raise ValueError("power: the law needs at least two outcomes")
    order = np.argsort(p)[::-1]
    if p[order[0]] < shift:
        raise ValueError(f"power: the most probable outcome has {p[order[0]]:.3g} < shift {shift}")
    alt = p.copy()
    alt[order[0]] -= shift
    alt[order[1]] += shift
    alt /= alt.sum()
    rng = np.random.default_rng(seed)
    rejected = sum(chi_square_gof(rng.multinomial(draws, alt), p).rejects(alpha) for _ in range(trials))
    return rejected / trials


def speculative_decode(rule, target, draft, prompt, n, sampling, rng, shape="chain", k=2):
    """Decodes at least n tokens after `prompt` by speculative rounds over two small
    models (MarkovModel, or anything with vocab_size and logits(context)), with
    `rule` verifying each round: the loop a lossless rule must leave the target's
    law unchanged through. Each round drafts from the draft model's warped rows
    with `rng` (a RandomStream), in one of two shapes:
      "chain": k tokens, each drawn from the row after the ones before it;
      "tree":  two children of the root drawn i.i.d., each with one child below.
    `rule` is one of specdec's rules or your own object with the same
    verify(tree, target_rows, draft_rows, rng) -> result.emitted_tokens(tree).
    Returns the emitted tokens (a round may overshoot n)."""
    from ._specdec import ChildMode, DraftTree, warp

    context = list(prompt)
    out = []
    while len(out) < n:
        q_row = lambda extra: warp(draft.logits(context + extra), sampling)  # noqa: E731
        tree = DraftTree(context[-1])
        rows = []
        if shape == "chain":
            path = []
            for depth in range(k):
                rows.append(q_row(path))
                token = rng.sample(rows[-1])
                tree.add_node(depth - 1, token, float(rows[-1][token]))
                tree.set_children_source(depth - 1, depth, ChildMode.SAMPLED_WITH_REPLACEMENT)
                path.append(token)
        elif shape == "tree":
            rows.append(q_row([]))
            tree.set_children_source(-1, 0, ChildMode.SAMPLED_WITH_REPLACEMENT)
            firsts = [rng.sample(rows[0]) for _ in range(2)]
            for token in firsts:
                tree.add_node(-1, token, float(rows[0][token]))
            for i, token in enumerate(firsts):
                rows.append(q_row([token]))
                below = rng.sample(rows[-1])
                tree.add_node(i, below, float(rows[-1][below]))
                tree.set_children_source(i, len(rows) - 1, ChildMode.SAMPLED_WITH_REPLACEMENT)
        else:
            raise ValueError(f"speculative_decode: shape must be 'chain' or 'tree', not {shape!r}")
        paths = [[]] + [_path_tokens(tree, i) for i in range(len(tree))]
        target_rows = np.stack([warp(target.logits(context + p), sampling) for p in paths])
        result = rule.verify(tree, target_rows, np.stack(rows), rng)
        emitted = result.emitted_tokens(tree)
        out += emitted
        context += emitted
    return out


def _path_tokens(tree, node):
    tokens = tree.tokens
    return [tokens[i] for i in tree.path_to(node)]
