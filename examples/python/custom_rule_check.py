"""Checking a rule of your own with specdec's test kit (docs/python.md).

A researcher's new acceptance rule is lossless only if every decode that uses
it follows the target's law. Here two candidate rules are checked over small
Markov models: specdec's speculative sampling, which passes, and a
deliberately broken "accept when the draft is at least as likely under the
target" rule, which the kit catches.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/custom_rule_check.py
"""
import numpy as np

import specdec
from specdec import testing as T


class AcceptIfLikely:
    """Broken on purpose: keeps a drafted token when p(x) >= q(x), otherwise
    draws the replacement from p. (Speculative sampling keeps it with
    probability min(1, p/q) and draws from norm(max(0, p - q)).)"""

    def verify(self, tree, target, draft, rng):
        tokens, accepted = tree.tokens, []
        for i, x in enumerate(tokens):  # a chain: node i was drafted from draft row i
            if target[i][x] >= draft[i][x]:
                accepted.append(x)
                continue
            return _Result(accepted + [rng.sample(target[i])])
        return _Result(accepted + [rng.sample(target[len(tokens)])])


class _Result:
    def __init__(self, tokens):
        self.tokens = tokens

    def emitted_tokens(self, tree):
        return self.tokens


def main():
    target, draft = T.MarkovModel(5, seed=1), T.MarkovModel(5, seed=1, noise=0.7)
    sampling, prompt, draws = specdec.SamplingParams(temperature=1.0), [1, 2], 60000
    law = T.law_of(target, prompt, 2, sampling)  # exact law of the first two tokens
    print(f"power against a 1.5% shift with {draws} decodes: {T.power(law, draws, shift=0.015):.2f}")
    for rule in (specdec.SpeculativeSampling(), AcceptIfLikely()):
        decodes = (T.speculative_decode(rule, target, draft, prompt, 2, sampling, specdec.RandomStream(7, i), k=2)
                   for i in range(draws))
        result = T.chi_square_gof(np.ravel(T.counts_of(decodes, 5, 2)), np.ravel(law))
        verdict = "rejected: not lossless" if result.rejects(1e-3) else "fits the target's law"
        print(f"{type(rule).__name__:>20}: {verdict} ({result!r})")


if __name__ == "__main__":
    main()
