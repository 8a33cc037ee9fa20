"""specdec's acceptance rules and warp as PyTorch operators, torch.ops.specdec.*
(docs/python.md, "PyTorch operators"), for engines that keep their rows in
torch tensors: CPU tensors always, CUDA tensors when specdec was built with
its CUDA backend. Importing this module loads them.

The shapes follow FlashInfer's sampling API (flashinfer.sampling), so that a
PyTorch engine can swap its rejection sampler for specdec's:

    out = specdec.ops.chain_speculative_sampling(draft_probs, draft_token_ids, target_probs,
                                                 seed=seed, offset=offset)
    # out: [batch, n + 1] int32, the accepted drafts, the emitted token, then -1

Each row b draws its uniforms philox_uniform(seed_b, b, offset_b + j): pass an
int (every row), or an int64 tensor [batch] (a seed and an offset per
request). A call reads at most n + 1 uniforms per row (n: drafts or tree
nodes), so offset + n + 1 is a safe next offset. With no seed, one is drawn
from torch's default generator (torch.manual_seed governs it).

The operators take the rows as they are: warp's rows, and probability rows that
sum to one. On CPU tensors a bad input raises specdec's typed error; on CUDA
tensors (nothing waits for the device) a refused request is flagged instead:
num_accepted -1 and its tokens -1, a bad warp row by its status."""
import functools
import os

import torch

from . import _specdec

torch.ops.load_library(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_ops.so"))

__all__ = ["warp", "chain_speculative_sampling", "block_verification", "verify_trees", "rejection_sample",
           "tree_from_first_child_next_sibling", "TREE_RULES", "WARP_STATUS"]

TREE_RULES = ("greedy", "speculative_sampling", "recursive_rejection_sampling", "block_verification",
              "traversal_verification", "typical_acceptance")
"""The rules verify_trees takes by name."""

WARP_STATUS = {0: "ok", 1: "a NaN or +inf logit", 2: "every logit is -inf", 3: "bad sampling parameters"}
"""What warp's status codes mean; a row with a status other than 0 is all zeros."""


def _typed(f):
    """Raises the operator's errors as specdec's own classes (the C++ kernels
    name the class in the message: "specdec.ShapeError: ...")."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except RuntimeError as e:
            message = str(e)
            if message.startswith("specdec."):
                name, _, rest = message.partition(": ")
                cls = getattr(_specdec, name[len("specdec."):], None)
                if isinstance(cls, type) and issubclass(cls, _specdec.Error):
                    raise cls(rest.split("\n")[0]) from None
            raise

    return wrapper


def _seed_args(seed, offset):
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    if offset is None:
        offset = 0
    seed_arr, seed_val = (seed, 0) if isinstance(seed, torch.Tensor) else (None, int(seed))
    offset_arr, offset_val = (offset, 0) if isinstance(offset, torch.Tensor) else (None, int(offset))
    return seed_arr, seed_val, offset_arr, offset_val


def _per_row(value, rows, dtype, device):
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype)
    return torch.full((rows,), value, dtype=dtype, device=device)


@_typed
def warp(logits, temperature=1.0, top_k=0, top_p=1.0, return_status=False):
    """Probability rows from logits [rows, vocab] (float32) under each row's
    temperature (0: greedy, one-hot at the argmax), top-k (0: off) and top-p
    (1: off): scalars for every row or [rows] tensors. Exactly specdec's warp
    (core/warp.hpp), bit for bit on either device. With return_status, also
    the [rows] int32 status (WARP_STATUS); otherwise a bad row raises
    InvalidDistributionError (on CPU tensors, or after a sync on CUDA ones)."""
    rows, device = logits.shape[0], logits.device
    probs, status = torch.ops.specdec.warp(logits, _per_row(temperature, rows, torch.float32, device),
                                           _per_row(top_k, rows, torch.int32, device),
                                           _per_row(top_p, rows, torch.float32, device))
    if return_status:
        return probs, status
    bad = torch.nonzero(status).flatten()
    if bad.numel():
        row = int(bad[0])
        raise _specdec.InvalidDistributionError(f"warp: row {row}: {WARP_STATUS[int(status[row])]}")
    return probs


def _chain(op, draft_probs, draft_token_ids, target_probs, maybe_output_emitted_draft_token_num, seed, offset):
    output, emitted = op(draft_probs, draft_token_ids, target_probs, *_seed_args(seed, offset))
    if maybe_output_emitted_draft_token_num is not None:
        maybe_output_emitted_draft_token_num.copy_(emitted)
    return output


@_typed
def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_emitted_draft_token_num=None,
                               seed=None, offset=None):
    """Speculative sampling of a chain per request (arXiv 2211.17192, Algorithm 1),
    FlashInfer's signature: draft_probs [batch, n, vocab] (None: the drafts were
    chosen deterministically, q one-hot), draft_token_ids [batch, n] (int32 or
    int64), target_probs [batch, n + 1, vocab]. Returns output_token_ids [batch,
    n + 1] int32: the accepted drafts, the emitted token, then -1. The number of
    accepted drafts goes into maybe_output_emitted_draft_token_num [batch] when
    given. Lossless."""
    return _chain(torch.ops.specdec.chain_speculative_sampling, draft_probs, draft_token_ids, target_probs,
                  maybe_output_emitted_draft_token_num, seed, offset)


@_typed
def block_verification(draft_probs, draft_token_ids, target_probs, maybe_output_emitted_draft_token_num=None,
                       seed=None, offset=None):
    """Block verification of a chain per request (arXiv 2403.10444, Algorithm 2):
    chain_speculative_sampling's arguments and outputs, and never fewer tokens
    in expectation. Lossless."""
    return _chain(torch.ops.specdec.block_verification, draft_probs, draft_token_ids, target_probs,
                  maybe_output_emitted_draft_token_num, seed, offset)


@_typed
def verify_trees(rule, parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes=None, max_depth=-1,
                 seed=None, offset=None, posterior_threshold=0.09, posterior_alpha=0.3):
    """Verifies one draft tree per request with `rule` (TREE_RULES), in the flat
    layout of specdec's CUDA kernels, padded to the largest tree:

      parents      [batch, nodes] int32: node i's parent, in [-1, i) (-1: the root)
      tokens       [batch, nodes] int32 or int64: node i's token
      slot_draws   [batch, nodes + 1] uint8: how slot s's children were drafted
                   (the root at 0, node i at i + 1): 0 deterministically,
                   1 i.i.d. from the slot's draft row, 2 without replacement
      draft_probs  [batch, nodes + 1, vocab] or None: slot s's draft row, at s + 1
      target_probs [batch, nodes + 1, vocab]: the target's row after each slot
      tree_nodes   [batch] int32 or None: each tree's own node count
      max_depth    the longest path returned (-1: nodes)

    Returns (accepted_nodes [batch, max_depth] int32, -1 padded; num_accepted
    [batch] int32; emitted [batch] int32, the token after the path).
    speculative_sampling and block_verification take chains; greedy reads the
    target rows' argmax only; typical_acceptance (lossy) its two parameters."""
    if rule not in TREE_RULES:
        raise _specdec.InvalidArgumentError(f"verify_trees: unknown rule {rule!r}; one of {', '.join(TREE_RULES)}")
    return torch.ops.specdec.verify_trees(rule, parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes,
                                          max_depth, *_seed_args(seed, offset), posterior_threshold,
                                          posterior_alpha)


# --- engine-shaped adapters ---------------------------------------------------------
def rejection_sample(draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, seed=None,
                     offset=None, rule="speculative_sampling"):
    """Chains of different lengths in the flat layout of vLLM's rejection sampler:
    draft_token_ids [T] (every request's drafts, one after another),
    num_draft_tokens [batch] (a list or tensor), draft_probs [T, vocab] or None,
    target_probs [T, vocab] (the target's row at each draft's position),
    bonus_token_ids [batch] (the token emitted when a request accepts all its
    drafts). Returns output_token_ids [batch, max drafts + 1] int32: the
    accepted drafts, the emitted token, then -1 (vLLM's placeholder). `rule`:
    speculative_sampling or block_verification (lossless), or greedy."""
    device = target_probs.device
    counts = torch.as_tensor(num_draft_tokens, dtype=torch.int64, device=device)
    batch, vocab = counts.numel(), target_probs.shape[-1]
    n = int(counts.max()) if batch else 0
    starts = torch.cumsum(counts, 0) - counts
    # (b, i) of each flat draft: its place in the padded [batch, n] layout
    b = torch.repeat_interleave(torch.arange(batch, device=device), counts)
    i = torch.arange(counts.sum().item(), device=device) - starts[b]
    tokens = torch.zeros((batch, n), dtype=torch.int32, device=device)
    tokens[b, i] = draft_token_ids.to(device=device, dtype=torch.int32)
    target = torch.zeros((batch, n + 1, vocab), dtype=torch.float32, device=device)
    target[b, i] = target_probs.to(torch.float32)
    target[torch.arange(batch, device=device), counts] = _one_hot(bonus_token_ids, vocab, device)
    draft, draws = None, torch.zeros((batch, n + 1), dtype=torch.uint8, device=device)
    if draft_probs is not None:
        draft = torch.zeros((batch, n + 1, vocab), dtype=torch.float32, device=device)
        draft[b, i] = draft_probs.to(torch.float32)
        draws[b, i] = 1
    parents = torch.arange(-1, n - 1, dtype=torch.int32, device=device).expand(batch, n).contiguous()
    accepted, num_accepted, emitted = verify_trees(rule, parents, tokens, draws, draft, target,
                                                   counts.to(torch.int32), seed=seed, offset=offset)
    out = torch.full((batch, n + 1), -1, dtype=torch.int32, device=device)
    keep = torch.arange(n + 1, device=device)[None, :] < num_accepted[:, None]
    out[:, :n][keep[:, :n]] = tokens[keep[:, :n]]
    out[torch.arange(batch, device=device), num_accepted.clamp(min=0).long()] = emitted
    return out


def _one_hot(tokens, vocab, device):
    return torch.nn.functional.one_hot(torch.as_tensor(tokens, device=device).long().flatten(), vocab).float()


def tree_from_first_child_next_sibling(candidates, next_token, next_sibling):
    """SGLang's EAGLE trees as verify_trees takes them. SGLang holds a tree per
    request as candidates [batch, N] (index 0: the root, the last verified
    token), retrive_next_token [batch, N] (each node's first child, -1: none)
    and retrive_next_sibling [batch, N] (its next sibling, -1: none); its
    target_probs [batch, N, vocab] hold the row after each candidate, which is
    verify_trees' layout already (the root's row first). Returns (parents,
    tokens) [batch, N - 1] int32: node j here is candidate j + 1, so an
    accepted node a is SGLang's candidate a + 1. Children must come after their
    parent (SGLang's order); InvalidTreeError otherwise."""
    batch, size = candidates.shape
    parent = torch.full((batch, size), -2, dtype=torch.int64)
    parent[:, 0] = -1
    child, sibling = next_token.cpu().long(), next_sibling.cpu().long()
    rows = torch.arange(batch)
    for j in range(size):
        for link, value in ((child[:, j], torch.full((batch,), j)), (sibling[:, j], parent[:, j])):
            has = link >= 0
            if bool((has & (link <= j)).any()):
                raise _specdec.InvalidTreeError(f"candidate {j} links to an earlier candidate")
            parent[rows[has], link[has]] = value[has]
    if bool((parent[:, 1:] < 0).any()):
        raise _specdec.InvalidTreeError("a candidate is reachable from no parent")
    parents = (parent[:, 1:] - 1).to(torch.int32).to(candidates.device)  # candidate indices -> node indices
    return parents, candidates[:, 1:].to(torch.int32)
