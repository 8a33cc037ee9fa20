"""specdec: speculative decoding components for LLM inference, from Python.

The classes and functions here are the C++ library's own (bound with
pybind11), not a second implementation: the same seeds give the same tokens
as in C++. docs/python.md shows how to use them.

    import numpy as np, specdec
    tree = specdec.DraftTree.chain(root_token=5, tokens=[2, 7], draft_probs=[0.4, 0.5])
    result = specdec.SpeculativeSampling().verify(tree, target_rows, draft_rows, specdec.RandomStream(seed=1))
    result.emitted_tokens(tree)

The engine runs over models written in Python (the Model protocol; see
specdec.models.MarkovLM):

    decoder = specdec.method("chain:k=4", target=my_target, draft=my_draft)
    decoder.begin(0, prompt, max_new_tokens=64); decoder.step(); decoder.result(0).tokens

specdec.testing holds the statistical harness of the losslessness tests.
"""
from ._specdec import (  # noqa: F401
    __version__,
    BlockVerification,
    ChainBuilder,
    ChainPick,
    ChildMode,
    ConfidenceStop,
    CostAwareTree,
    Decoder,
    DeviceError,
    DraftBudget,
    DraftTree,
    DynamicTreeBuilder,
    Error,
    FixedLength,
    FollowVerified,
    GenerationResult,
    GreedyAcceptance,
    HardwareBudget,
    HeuristicLength,
    InvalidArgumentError,
    InvalidDistributionError,
    InvalidTreeError,
    IoError,
    ModelLoadError,
    MultiSequenceBuilder,
    NgramDrafter,
    RandomStream,
    SequenceInput,
    RecursiveRejectionSampling,
    RoundShape,
    SamplingParams,
    ShapeError,
    SpeculativeSampling,
    StaticTreeBuilder,
    SuffixCache,
    SuffixDrafter,
    SuffixTreeBuilder,
    Tokenizer,
    TokenizerError,
    TraversalVerification,
    TypicalAcceptance,
    TypicalAcceptanceParams,
    UnsupportedError,
    VerifyResult,
    break_even_draft_step,
    method,
    methods,
    sequoia_choices,
    speedup_over,
    warp,
)
from . import models, testing  # noqa: F401

try:  # built with the libtorch backend
    from ._specdec import LlamaModel, load  # noqa: F401
except ImportError:
    pass

RULES = (GreedyAcceptance, SpeculativeSampling, RecursiveRejectionSampling, BlockVerification,
         TraversalVerification, TypicalAcceptance)
"""Every acceptance rule; each has verify(tree, target, draft, rng) and the class
attributes lossless, needs_draft_probs and greedy_only."""

BUILDERS = (ChainBuilder, StaticTreeBuilder, DynamicTreeBuilder, MultiSequenceBuilder, SuffixTreeBuilder)
"""Every tree builder; each has build(drafter, budget, root, rng) -> (DraftTree, rows)."""

POLICIES = (FixedLength, HeuristicLength, ConfidenceStop, FollowVerified, HardwareBudget, CostAwareTree)
"""Every length policy; each has budget() -> DraftBudget and observe(num_drafted, num_accepted, ...)."""
