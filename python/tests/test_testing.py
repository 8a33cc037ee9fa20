"""specdec.testing itself: exact laws, the chi-square test, power."""
import numpy as np
import pytest

import specdec
from specdec import testing as T


def test_exact_law_is_the_product_of_warped_conditionals():
    model = T.MarkovModel(4, 3)
    sampling = specdec.SamplingParams(temperature=0.8, top_p=0.9)
    law = T.law_of(model, [0, 1], 3, sampling)
    assert law.shape == (4, 4, 4) and law.sum() == pytest.approx(1.0, abs=1e-6)
    p1 = specdec.warp(model.logits([0, 1]), sampling)
    p2 = specdec.warp(model.logits([0, 1, 2]), sampling)
    p3 = specdec.warp(model.logits([0, 1, 2, 3]), sampling)
    assert law[2, 3, 1] == pytest.approx(float(p1[2]) * float(p2[3]) * float(p3[1]), rel=1e-6)
    np.testing.assert_allclose(law.sum(axis=(1, 2)), p1, rtol=1e-5, atol=1e-7)
    with pytest.raises(specdec.InvalidArgumentError):
        T.exact_law(model.logits, [0], 0, 4, sampling)
    with pytest.raises(specdec.ShapeError):
        T.exact_law(lambda ctx: np.zeros(3, np.float32), [0], 1, 4, sampling)


def test_chi_square_accepts_the_law_and_rejects_a_shifted_one():
    law = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    rng = np.random.default_rng(1)
    fits = sum(not T.chi_square_gof(rng.multinomial(20000, law), law).rejects(1e-3) for _ in range(50))
    assert fits >= 48  # false rejections at alpha = 1e-3 are rare
    shifted = np.array([0.38, 0.32, 0.2, 0.1, 0.0])
    assert T.chi_square_gof(rng.multinomial(20000, shifted), law).rejects(1e-3)
    impossible = T.chi_square_gof([4000, 3000, 2000, 999, 1], law)
    assert impossible.impossible == 1 and impossible.rejects(1e-3)
    with pytest.raises(specdec.ShapeError):
        T.chi_square_gof([1, 2], [0.5, 0.25, 0.25])


def test_power_grows_with_draws_and_shift():
    law = np.full(10, 0.1)
    assert T.power(law, 1000, 0.01, trials=100) < 0.5 < T.power(law, 200000, 0.01, trials=100)
    assert T.power(law, 20000, 0.05, trials=100) == 1.0
    with pytest.raises(ValueError):
        T.power(law, 1000, 0.5)


def test_counts_of_counts_the_first_n_tokens():
    c = T.counts_of([[1, 2, 0], [1, 2], [0, 0]], 3, 2)
    assert c.shape == (3, 3) and c[1, 2] == 2 and c[0, 0] == 1 and c.sum() == 3
    with pytest.raises(ValueError):
        T.counts_of([[1]], 3, 2)
