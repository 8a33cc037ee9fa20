"""specdec: speculative decoding components for LLM inference, from Python.

The classes and functions here are the C++ library's own (bound with
pybind11), not a second implementation: the same seeds give the same tokens
as in C++. docs/python.md shows how to use them.

    import numpy as np, specdec
    tree = specdec.DraftTree.chain(root_token=5, tokens=[2, 7], draft_probs=[0.4, 0.5])
    result = specdec.SpeculativeSampling().verify(tree, target_rows, draft_rows, specdec.RandomStream(seed=1))
    result.emitted_tokens(tree)

specdec.testing holds the statistical harness of the losslessness tests.
"""
from ._specdec import (  # noqa: F401
    __version__,
    BlockVerification,
    ChildMode,
    DeviceError,
    DraftTree,
    Error,
    GreedyAcceptance,
    InvalidArgumentError,
    InvalidDistributionError,
    InvalidTreeError,
    IoError,
    ModelLoadError,
    RandomStream,
    RecursiveRejectionSampling,
    SamplingParams,
    ShapeError,
    SpeculativeSampling,
    TokenizerError,
    TraversalVerification,
    TypicalAcceptance,
    TypicalAcceptanceParams,
    UnsupportedError,
    VerifyResult,
    warp,
)
from . import testing  # noqa: F401

RULES = (GreedyAcceptance, SpeculativeSampling, RecursiveRejectionSampling, BlockVerification,
         TraversalVerification, TypicalAcceptance)
"""Every acceptance rule; each has verify(tree, target, draft, rng) and the class
attributes lossless, needs_draft_probs and greedy_only."""
