"""Models in Python that specdec's engine can drive (docs/python.md, "A model
of your own"): MarkovLM, the small Markov model of specdec.testing as a
Model, and the template a model of your own follows."""


class MarkovLM:
    """specdec.testing.MarkovModel behind the Model protocol, written in Python:
    each forward computes every new token's logits from the context it sees
    (the committed tokens, the staged ones its mask shows, itself). A reference
    for the protocol and a model to test methods with."""

    def __init__(self, markov, max_context=1 << 20):
        self.markov = markov
        self.vocab_size = markov.vocab_size
        self.hidden_size = 0
        self.max_context = max_context
        self.sequences = {}
        self.forwards = 0

    def open(self, seq):
        self.sequences[seq] = ([], [])  # committed, staged

    def close(self, seq):
        del self.sequences[seq]

    def forward(self, sequences, logits, hidden):
        if hidden is not None:
            raise NotImplementedError("MarkovLM has no hidden states")
        self.forwards += 1
        row = 0
        for s in sequences:
            committed, staged = self.sequences[s.seq]
            if not s.extend_staged:
                staged.clear()
            before = len(staged)
            if len(committed) + before + len(s.tokens) > self.max_context:
                raise ValueError(f"sequence {s.seq} would exceed the context of {self.max_context}")
            for i, token in enumerate(s.tokens):
                me = before + i
                seen = [staged[j] for j in range(me) if s.mask is None or s.mask[me, j]]
                staged.append(int(token))
                if logits is not None:
                    logits[row] = self.markov.logits(committed + seen + [int(token)])
                row += 1

    def accept(self, seq, path):
        committed, staged = self.sequences[seq]
        committed += [staged[p] for p in path]
        staged.clear()

    def rollback(self, seq, length):
        del self.sequences[seq][0][length:]
