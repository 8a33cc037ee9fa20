"""A small Llama written in PyTorch behind specdec's Model protocol
(docs/python.md, "A model of your own"): the template for putting a
torch.nn.Module of your own under specdec's engine, as target or draft.

    target, draft = TorchLlama(seed=0), TorchLlama(seed=0, perturb=0.3)
    specdec.method("chain:k=4", target, draft).generate(prompt, max_new_tokens=32)

Each forward runs the new tokens of every sequence against its committed KV
cache and the tokens the previous forward staged, under the engine's tree
mask, and writes the logits straight into the engine's buffer (a NumPy view,
seen from torch without a copy); accept() keeps the accepted path's keys and
values, rollback() cuts the cache. logits(context) recomputes a context
without the cache, for exact laws (specdec.testing.law_of)."""
import torch
from torch import nn

__all__ = ["LlamaModule", "TorchLlama"]


class RMSNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = nn.Linear(2 * hidden, hidden, bias=False)

    def forward(self, x, cos, sin, cache, staged, sees):
        """x: [n, hidden] new tokens. cache: this layer's committed (k, v) pairs,
        all visible; staged: the (k, v) of tokens staged by earlier forwards of
        this round, to which the new tokens' are appended; sees: [n, staged + n]
        bool, what each new token sees of staged + new."""
        n, heads = x.shape[0], self.heads
        dim = x.shape[1] // heads
        q, k, v = self.qkv(self.norm1(x)).view(n, 3, heads, dim).unbind(1)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        staged += list(zip(k, v))
        keys = torch.stack([kv[0] for kv in cache + staged])
        values = torch.stack([kv[1] for kv in cache + staged])
        visible = torch.cat([torch.ones((n, len(cache)), dtype=torch.bool), sees], 1)
        scores = torch.einsum("nhd,thd->hnt", q, keys) / dim ** 0.5
        attn = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        x = x + self.out(torch.einsum("hnt,thd->nhd", attn, values).reshape(n, -1))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(nn.functional.silu(gate) * up)


class LlamaModule(nn.Module):
    """The network: embedding, blocks, final norm, LM head."""

    def __init__(self, vocab_size=16, hidden_size=32, layers=2, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.blocks = nn.ModuleList(Block(hidden_size, heads) for _ in range(layers))
        self.norm = RMSNorm(hidden_size)
        self.head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, tokens, positions, caches, staged, sees):
        x = self.embed(tokens)
        cos, sin = rotary(positions, x.shape[1] // self.blocks[0].heads)
        for block, cache, stage in zip(self.blocks, caches, staged):
            x = block(x, cos, sin, cache, stage, sees)
        return self.head(self.norm(x))


def rotary(positions, dim):
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    angles = positions.to(torch.float32)[:, None] * inv[None, :]
    return angles.cos()[:, None, :], angles.sin()[:, None, :]


def rotate(x, cos, sin):
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


class TorchLlama:
    """A LlamaModule behind the Model protocol, with a KV cache per sequence.
    Random weights from `seed` (the LM head scaled by `sharpness`, for peaked
    rows as a trained model's); `perturb` adds that much relative noise to
    every weight (seeded by seed + 1): a correlated, imperfect draft of the
    model with the same seed."""

    def __init__(self, vocab_size=16, hidden_size=32, layers=2, heads=4, seed=0, sharpness=4.0, perturb=0.0,
                 module=None, max_context=4096):
        if module is None:
            torch.manual_seed(seed)
            module = LlamaModule(vocab_size, hidden_size, layers, heads)
            with torch.no_grad():
                module.head.weight.mul_(sharpness)
                if perturb:
                    g = torch.Generator().manual_seed(seed + 1)
                    for w in module.parameters():
                        w.add_(perturb * w.abs().mean() * torch.randn(w.shape, generator=g))
        self.net = module.eval()
        self.vocab_size = module.embed.num_embeddings
        self.hidden_size = 0  # no hidden states for feature drafters
        self.max_context = max_context
        self.sequences = {}  # seq -> (committed (k, v) per layer, staged (k, v) per layer, staged count)
        self.forwards = 0

    def open(self, seq):
        self.sequences[seq] = [[[] for _ in self.net.blocks], [[] for _ in self.net.blocks], 0]

    def close(self, seq):
        del self.sequences[seq]

    def forward(self, sequences, logits, hidden):
        if hidden is not None:
            raise NotImplementedError("TorchLlama writes no hidden states")
        self.forwards += 1
        out = None if logits is None else torch.from_numpy(logits)  # the engine's buffer, no copy
        row = 0
        with torch.no_grad():
            for s in sequences:
                state = self.sequences[s.seq]
                committed, staged = state[0], state[1]
                if not s.extend_staged:
                    for layer in staged:
                        layer.clear()
                    state[2] = 0
                before, n = state[2], len(s.tokens)
                if len(committed[0]) + before + n > self.max_context:
                    raise ValueError(f"sequence {s.seq} would exceed the context of {self.max_context}")
                if s.mask is None:  # causal over the staged tokens and these
                    sees = torch.ones((n, before + n), dtype=torch.bool).tril(before)
                else:
                    sees = torch.from_numpy(s.mask[before:before + n, :before + n].copy())
                rows = self.net(torch.from_numpy(s.tokens.astype("int64")), torch.from_numpy(s.positions),
                                committed, staged, sees)
                state[2] = before + n
                if out is not None:
                    out[row:row + n] = rows
                row += n

    def accept(self, seq, path):
        committed, staged, _ = self.sequences[seq]
        for cache, stage in zip(committed, staged):
            cache += [stage[p] for p in path]
            stage.clear()
        self.sequences[seq][2] = 0

    def rollback(self, seq, length):
        for cache in self.sequences[seq][0]:
            del cache[length:]

    def logits(self, context):
        """The logits after `context`, recomputed without the cache (a NumPy row)."""
        n = len(context)
        with torch.no_grad():
            rows = self.net(torch.tensor(context), torch.arange(n), [[] for _ in self.net.blocks],
                            [[] for _ in self.net.blocks], torch.ones((n, n), dtype=torch.bool).tril())
        return rows[-1].numpy()
