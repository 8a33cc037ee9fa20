import numpy as np
import pytest


@pytest.fixture
def p_q():
    """A target row p and a draft row q over 6 tokens that disagree."""
    p = np.array([0.5, 0.2, 0.1, 0.1, 0.05, 0.05], dtype=np.float32)
    q = np.array([0.05, 0.05, 0.1, 0.2, 0.3, 0.3], dtype=np.float32)
    return p, q
