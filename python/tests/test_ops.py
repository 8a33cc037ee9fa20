"""torch.ops.specdec (specdec.ops): the operators emit the C++ rules' own
tokens for the same seeds, keep the target's law when an engine decodes in
batches with them (chi-square, with power and a must-fail check), warp as
specdec.warp does, refuse bad input with typed errors, and, on a CUDA build
with a device, give the CPU operators' outputs."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import specdec  # noqa: E402
from specdec import testing as T  # noqa: E402

ops = pytest.importorskip("specdec.ops")

RULE_CLASSES = {
    "greedy": specdec.GreedyAcceptance,
    "speculative_sampling": specdec.SpeculativeSampling,
    "recursive_rejection_sampling": specdec.RecursiveRejectionSampling,
    "block_verification": specdec.BlockVerification,
    "traversal_verification": specdec.TraversalVerification,
    "typical_acceptance": specdec.TypicalAcceptance,
}
CHAIN_ONLY = ("speculative_sampling", "block_verification")


def random_rows(gen, shape, vocab, sharpness=2.0):
    return torch.softmax(torch.randn(*shape, vocab, generator=gen) * sharpness, -1)


def random_trees(rule, batch=24, nodes=6, vocab=9, seed=0):
    """A batch of flat trees (chains for the chain rules), drafted from their
    draft rows, with ragged sizes and every child mode."""
    gen = torch.Generator().manual_seed(seed)
    draft = random_rows(gen, (batch, nodes + 1), vocab)
    target = torch.softmax(draft.log() + 0.5 * torch.randn(draft.shape, generator=gen), -1)  # close to the draft
    parents = torch.full((batch, nodes), -1, dtype=torch.int32)
    tokens = torch.zeros((batch, nodes), dtype=torch.int32)
    draws = torch.zeros((batch, nodes + 1), dtype=torch.uint8)
    sizes = torch.randint(0, nodes + 1, (batch,), generator=gen, dtype=torch.int32)
    for b in range(batch):
        mode = b % 3 if rule not in CHAIN_ONLY else b % 2  # chain rules: i.i.d. or deterministic drafts
        for i in range(int(sizes[b])):
            parent = i - 1 if rule in CHAIN_ONLY else int(torch.randint(-1, i, (1,), generator=gen))
            siblings = [int(tokens[b, j]) for j in range(i) if int(parents[b, j]) == parent]
            draws[b, parent + 1] = mode
            if mode == 0:  # deterministic: the slot's most likely tokens, in order
                token = int(torch.argsort(draft[b, parent + 1], descending=True)[len(siblings)])
            else:
                row = draft[b, parent + 1].clone()
                if mode == 2:
                    row[siblings] = 0
                token = int(torch.multinomial(row, 1, generator=gen))
            parents[b, i], tokens[b, i] = parent, token
    return parents, tokens, draws, draft, target, sizes


def rule_outcome(rule, parents, tokens, draws, draft, target, size, seed, stream, offset):
    """The bound C++ rule's outcome for one flat tree."""
    tree = specdec.DraftTree(0)
    modes = {0: specdec.ChildMode.DETERMINISTIC, 1: specdec.ChildMode.SAMPLED_WITH_REPLACEMENT,
             2: specdec.ChildMode.SAMPLED_WITHOUT_REPLACEMENT}
    for i in range(size):
        parent, token = int(parents[i]), int(tokens[i])
        tree.add_node(parent, token, float(draft[parent + 1, token]) if int(draws[parent + 1]) else 1.0)
    for slot in range(-1, size):
        if tree.children(slot):
            mode = int(draws[slot + 1])
            tree.set_children_source(slot, slot + 1 if mode else -1, modes[mode])
    result = RULE_CLASSES[rule]().verify(tree, target[: size + 1].numpy(), draft[: size + 1].numpy(),
                                         specdec.RandomStream(seed, stream, offset))
    return list(result.accepted_nodes), result.bonus_token


@pytest.mark.parametrize("rule", ops.TREE_RULES)
def test_verify_trees_emits_the_cpp_rules_tokens(rule):
    parents, tokens, draws, draft, target, sizes = random_trees(rule)
    seeds = torch.arange(100, 100 + len(sizes), dtype=torch.int64)
    accepted, num_accepted, emitted = ops.verify_trees(rule, parents, tokens, draws, draft, target, sizes,
                                                       seed=seeds, offset=7)
    assert accepted.shape == (len(sizes), parents.shape[1])
    deep = 0
    for b in range(len(sizes)):
        path, bonus = rule_outcome(rule, parents[b], tokens[b], draws[b], draft[b], target[b], int(sizes[b]),
                                   100 + b, b, 7)
        n = int(num_accepted[b])
        assert accepted[b, :n].tolist() == path and (accepted[b, n:] == -1).all() and int(emitted[b]) == bonus
        deep += n >= 2
    assert deep > 0  # some trees were accepted past depth 1


def test_chain_speculative_sampling_is_verify_trees_on_chains():
    gen = torch.Generator().manual_seed(3)
    batch, n, vocab = 40, 4, 12
    q, p = random_rows(gen, (batch, n), vocab), random_rows(gen, (batch, n + 1), vocab)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=gen).reshape(batch, n)  # int64, as torch gives
    parents = torch.arange(-1, n - 1, dtype=torch.int32).expand(batch, n).contiguous()
    draws = torch.ones((batch, n + 1), dtype=torch.uint8)
    q_slots = torch.cat([q, q[:, :1]], 1)  # the flat layout's row per slot (the leaf's is unread)
    for name, op in [("speculative_sampling", ops.chain_speculative_sampling),
                     ("block_verification", ops.block_verification)]:
        emitted_drafts = torch.empty(batch, dtype=torch.int32)
        out = op(q, x, p, emitted_drafts, seed=5, offset=2)
        accepted, num_accepted, emitted = ops.verify_trees(name, parents, x, draws, q_slots, p, seed=5, offset=2)
        assert out.dtype == torch.int32 and out.shape == (batch, n + 1)
        assert torch.equal(emitted_drafts, num_accepted)
        for b in range(batch):
            k = int(num_accepted[b])
            assert out[b, :k].tolist() == x[b, :k].tolist() and int(out[b, k]) == int(emitted[b])
            assert (out[b, k + 1:] == -1).all()
        # the same seed gives the same tokens; another, others
        assert torch.equal(op(q, x, p, seed=5, offset=2), out) and not torch.equal(op(q, x, p, seed=6), out)


# --- batched decoding with the operators keeps the target's law -------------------
VOCAB, PROMPT, DRAWS = 5, (1, 2), 40000
TARGET, DRAFT = T.MarkovModel(VOCAB, 1), T.MarkovModel(VOCAB, 1, noise=0.7)
SAMPLING = specdec.SamplingParams()


def rows_of(model, contexts, cache):
    out = []
    for c in contexts:
        if c not in cache:
            cache[c] = specdec.warp(model.logits(list(c)), SAMPLING)
        out.append(cache[c])
    return torch.from_numpy(np.stack(out))


def batched_decode(verify, shape, draws=DRAWS, seed=1):
    """The first two tokens of `draws` requests decoded together, round after
    round, as a PyTorch engine would: one op call per round for every request
    still short of two tokens. shape "chain": two i.i.d. drafts in a chain;
    "tree": two i.i.d. children of the root, one child below each."""
    rng = np.random.default_rng(seed)
    outs = [[] for _ in range(draws)]
    cache_t, cache_d = {}, {}
    if shape == "chain":
        parents = [-1, 0]
    else:
        parents = [-1, -1, 0, 1]
    n = len(parents)
    round_ = 0
    while True:
        active = [r for r in range(draws) if len(outs[r]) < 2]
        if not active:
            break
        contexts = [PROMPT + tuple(outs[r]) for r in active]
        tokens = np.zeros((len(active), n), np.int64)
        paths = [[] for _ in range(n + 1)]  # the tokens after the context, per slot (per batch row)
        draft_rows = torch.zeros((len(active), n + 1, VOCAB))
        for slot in range(-1, n):
            children = [i for i in range(n) if parents[i] == slot]
            if not children:
                continue
            q = rows_of(DRAFT, [c + tuple(p) for c, p in zip(contexts, paths_of(tokens, parents, slot))], cache_d)
            draft_rows[:, slot + 1] = q
            u = rng.random((len(active), len(children)))
            picks = (np.cumsum(q.numpy(), 1)[:, None, :] < u[:, :, None]).sum(2).clip(max=VOCAB - 1)
            tokens[:, children] = picks
        target_rows = torch.stack(
            [rows_of(TARGET, [c + tuple(p) for c, p in zip(contexts, paths_of(tokens, parents, slot))], cache_t)
             for slot in range(-1, n)], 1)
        seeds = torch.tensor(active, dtype=torch.int64) + 1000 * seed
        emitted = verify(shape, parents, tokens, draft_rows, target_rows, seeds, round_ * (n + 1))
        for r, e in zip(active, emitted):
            outs[r] += e
        round_ += 1
    return T.counts_of(outs, VOCAB, 2)


def paths_of(tokens, parents, slot):
    path = []
    while slot != -1:
        path.append(slot)
        slot = parents[slot]
    return [[int(row[i]) for i in reversed(path)] for row in tokens]


def via_verify_trees(rule):
    def verify(shape, parents, tokens, draft_rows, target_rows, seeds, offset):
        batch, n = tokens.shape
        par = torch.tensor(parents, dtype=torch.int32).expand(batch, n).contiguous()
        draws = torch.ones((batch, n + 1), dtype=torch.uint8)
        accepted, num, emitted = ops.verify_trees(rule, par, torch.from_numpy(tokens), draws, draft_rows,
                                                  target_rows, seed=seeds, offset=offset)
        return [[int(tokens[b, i]) for i in accepted[b, :num[b]]] + [int(emitted[b])] for b in range(batch)]
    return verify


def via_chain_op(op):
    def verify(shape, parents, tokens, draft_rows, target_rows, seeds, offset):
        out = op(draft_rows[:, :-1].contiguous(), torch.from_numpy(tokens), target_rows, seed=seeds, offset=offset)
        return [[t for t in row if t >= 0] for row in out.tolist()]
    return verify


def test_the_batched_test_has_power():
    assert T.power(T.law_of(TARGET, PROMPT, 2, SAMPLING), DRAWS, shift=0.02) >= 0.9


@pytest.mark.parametrize("verify,shape", [
    (via_chain_op(ops.chain_speculative_sampling), "chain"),
    (via_chain_op(ops.block_verification), "chain"),
    (via_verify_trees("recursive_rejection_sampling"), "tree"),
    (via_verify_trees("traversal_verification"), "tree"),
], ids=["chain_speculative_sampling", "block_verification", "rrs-tree", "traversal-tree"])
def test_batched_decoding_with_the_operators_keeps_the_target_law(verify, shape):
    T.assert_lossless(batched_decode(verify, shape), T.law_of(TARGET, PROMPT, 2, SAMPLING))


def test_the_must_fail_variant_is_caught():
    """Verifying against the draft's rows instead of the target's is a wrong
    rule (it emits the draft's law): the same harness rejects it."""
    def wrong(shape, parents, tokens, draft_rows, target_rows, seeds, offset):
        wrong_rows = torch.cat([draft_rows[:, :-1], target_rows[:, -1:]], 1)
        return via_chain_op(ops.chain_speculative_sampling)(shape, parents, tokens, draft_rows, wrong_rows, seeds,
                                                            offset)
    T.assert_rejected(batched_decode(wrong, "chain", draws=20000), T.law_of(TARGET, PROMPT, 2, SAMPLING))


# --- warp ---------------------------------------------------------------------------
def test_warp_is_specdecs_warp_row_by_row():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 50, generator=gen) * 3
    temperature = torch.tensor([0.0, 1.0, 0.7, 1.3, 1.0, 0.5])
    top_k = torch.tensor([0, 0, 5, 0, 10, 3], dtype=torch.int32)
    top_p = torch.tensor([1.0, 0.9, 1.0, 0.5, 0.8, 1.0])
    probs = ops.warp(logits, temperature, top_k, top_p)
    for r in range(6):
        want = specdec.warp(logits[r].numpy(), specdec.SamplingParams(float(temperature[r]), int(top_k[r]),
                                                                      float(top_p[r])))
        assert np.array_equal(probs[r].numpy(), want)  # bit for bit
    assert torch.equal(ops.warp(logits, temperature=0.8), torch.from_numpy(
        specdec.warp(logits.numpy(), specdec.SamplingParams(0.8))))


def test_warp_reports_bad_rows():
    logits = torch.tensor([[0.0, 1.0], [float("nan"), 0.0], [-float("inf")] * 2, [0.0, 1.0]])
    probs, status = ops.warp(logits, torch.tensor([1.0, 1.0, 1.0, -1.0]), return_status=True)
    assert status.tolist() == [0, 1, 2, 3] and (probs[1:] == 0).all() and probs[0].sum() == pytest.approx(1)
    with pytest.raises(specdec.InvalidDistributionError, match="row 1: a NaN"):
        ops.warp(logits)


# --- bad input ----------------------------------------------------------------------
def test_bad_input_raises_typed_errors():
    q, p = torch.full((2, 3, 4), 0.25), torch.full((2, 4, 4), 0.25)
    x = torch.zeros((2, 3), dtype=torch.int32)
    with pytest.raises(specdec.ShapeError, match="draft_token_ids: dimension 1 is 3, expected 1"):
        ops.chain_speculative_sampling(q, x, p[:, :2])
    with pytest.raises(specdec.InvalidArgumentError, match="target_probs must be Float, got Double"):
        ops.chain_speculative_sampling(q, x, p.double())
    with pytest.raises(specdec.InvalidTreeError, match="draft token 1 is 4, outside"):
        ops.chain_speculative_sampling(q, torch.tensor([[0, 4, 0], [0, 0, 0]]), p)
    with pytest.raises(specdec.ShapeError, match="seed_arr must be"):
        ops.chain_speculative_sampling(q, x, p, seed=torch.tensor([1]))
    with pytest.raises(specdec.InvalidDistributionError):
        ops.chain_speculative_sampling(q, x, torch.full((2, 4, 4), 0.5))  # rows sum to 2
    parents = torch.tensor([[-1, 0, 1]] * 2, dtype=torch.int32)
    draws = torch.ones((2, 4), dtype=torch.uint8)
    with pytest.raises(specdec.InvalidArgumentError, match="unknown rule 'nucleus'"):
        ops.verify_trees("nucleus", parents, x, draws, p, p)
    with pytest.raises(specdec.InvalidArgumentError, match="draft_probs is None"):
        ops.verify_trees("traversal_verification", parents, x, draws, None, p)
    with pytest.raises(specdec.InvalidTreeError, match="parent 2, not in"):
        ops.verify_trees("greedy", torch.tensor([[-1, 2, 1]] * 2, dtype=torch.int32), x, draws, p, p)
    with pytest.raises(specdec.InvalidArgumentError, match="slot_draws.*is 7"):
        ops.verify_trees("recursive_rejection_sampling", parents, x, draws * 7, p, p)
    with pytest.raises(specdec.InvalidArgumentError, match="max_depth 5 exceeds"):
        ops.verify_trees("greedy", parents, x, draws, p, p, max_depth=5)


# --- CUDA ---------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (or a CPU build of torch)")


@cuda
@pytest.mark.parametrize("rule", ops.TREE_RULES)
def test_cuda_tensors_give_the_cpu_outputs(rule):
    parents, tokens, draws, draft, target, sizes = random_trees(rule, batch=64, nodes=8, vocab=1000)
    seeds = torch.arange(len(sizes), dtype=torch.int64)
    cpu = ops.verify_trees(rule, parents, tokens, draws, draft, target, sizes, seed=seeds, offset=3)
    dev = ops.verify_trees(rule, *(t.cuda() for t in (parents, tokens, draws, draft, target, sizes)),
                           seed=seeds.cuda(), offset=3)
    for a, b in zip(cpu, dev):
        assert torch.equal(a, b.cpu())


@cuda
def test_cuda_chain_operators_and_warp_give_the_cpu_outputs():
    gen = torch.Generator().manual_seed(2)
    batch, n, vocab = 32, 5, 32000
    logits = torch.randn(batch * (n + 1), vocab, generator=gen) * 3
    p = ops.warp(logits, temperature=0.8, top_p=0.9)
    assert torch.equal(ops.warp(logits.cuda(), temperature=0.8, top_p=0.9).cpu(), p)
    p = p.reshape(batch, n + 1, vocab)
    q = random_rows(gen, (batch, n), vocab)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=gen).reshape(batch, n)
    for op in (ops.chain_speculative_sampling, ops.block_verification):
        assert torch.equal(op(q.cuda(), x.cuda(), p.cuda(), seed=9).cpu(), op(q, x, p, seed=9))


# --- torch tensors in the rules' and warp's Python API ------------------------------
class OnlyDLPack:
    """An array that offers DLPack and nothing else (no buffer, no __array__)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__()

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def test_the_rules_read_torch_tensors_through_dlpack(p_q):
    p, q = (torch.from_numpy(a) for a in p_q)
    tree = specdec.DraftTree.chain(root_token=0, tokens=[4], draft_probs=[float(q[4])])
    target, draft = torch.stack([p, p]), q[None]
    want = specdec.SpeculativeSampling().verify(tree, target.numpy(), draft.numpy(), specdec.RandomStream(3))
    for t, d in [(target, draft), (OnlyDLPack(target), OnlyDLPack(draft)),
                 (torch.stack([p, p], 1).T, draft)]:  # the last: not in C order, converted
        got = specdec.SpeculativeSampling().verify(tree, t, d, specdec.RandomStream(3))
        assert got.emitted_tokens(tree) == want.emitted_tokens(tree)
    logits = torch.randn(3, 7)
    assert np.array_equal(specdec.warp(OnlyDLPack(logits), SAMPLING), specdec.warp(logits.numpy(), SAMPLING))
    assert specdec.RandomStream(1).sample(OnlyDLPack(q)) == specdec.RandomStream(1).sample(q.numpy())


# --- engine-shaped adapters ------------------------------------------------------------
def via_rejection_sample(shape, parents, tokens, draft_rows, target_rows, seeds, offset):
    """vLLM's flat layout, ragged: odd requests send only their first draft."""
    batch = tokens.shape[0]
    counts = [2 - (b % 2) for b in range(batch)]
    flat = torch.cat([torch.from_numpy(tokens[b, :c]) for b, c in enumerate(counts)])
    q = torch.cat([draft_rows[b, :c] for b, c in enumerate(counts)])
    p = torch.cat([target_rows[b, :c] for b, c in enumerate(counts)])
    bonus = torch.stack([torch.multinomial(target_rows[b, c], 1, generator=GEN)[0] for b, c in enumerate(counts)])
    out = ops.rejection_sample(flat, counts, q, p, bonus, seed=seeds, offset=offset)
    assert out.shape == (batch, 3) and (out[1::2, 2] == -1).all()
    return [[t for t in row if t >= 0] for row in out.tolist()]


GEN = torch.Generator().manual_seed(0)


def test_vllm_shaped_ragged_chains_keep_the_target_law():
    T.assert_lossless(batched_decode(via_rejection_sample, "chain"), T.law_of(TARGET, PROMPT, 2, SAMPLING))


def test_rejection_sample_emits_the_bonus_after_a_fully_accepted_chain():
    vocab = 6
    drafts = torch.tensor([1, 2, 3, 4, 5, 0])  # requests of 3, 1 and 2 drafts
    counts = torch.tensor([3, 1, 2])
    rows = torch.nn.functional.one_hot(drafts, vocab).float()  # the target agrees with every draft
    out = ops.rejection_sample(drafts, counts, None, rows, torch.tensor([0, 4, 2]), seed=1)
    assert out.tolist() == [[1, 2, 3, 0], [4, 4, -1, -1], [5, 0, 2, -1]]
    rows[1] = torch.nn.functional.one_hot(torch.tensor(5), vocab).float()  # request 0 rejects its second draft
    assert ops.rejection_sample(drafts, counts, None, rows, torch.tensor([0, 4, 2]), seed=1)[0].tolist() == \
        [1, 5, -1, -1]


def test_sglang_trees_convert_to_parents():
    # root 9 -> (7 -> (3, 4), 8 -> 5): candidates in SGLang's order, index 0 the root
    candidates = torch.tensor([[9, 7, 8, 3, 4, 5]])
    next_token = torch.tensor([[1, 3, 5, -1, -1, -1]])
    next_sibling = torch.tensor([[-1, 2, -1, 4, -1, -1]])
    parents, tokens = ops.tree_from_first_child_next_sibling(candidates, next_token, next_sibling)
    assert parents.tolist() == [[-1, -1, 0, 0, 1]] and tokens.tolist() == [[7, 8, 3, 4, 5]]
    with pytest.raises(specdec.InvalidTreeError, match="earlier candidate"):
        ops.tree_from_first_child_next_sibling(candidates, torch.tensor([[1, 0, 5, -1, -1, -1]]), next_sibling)
