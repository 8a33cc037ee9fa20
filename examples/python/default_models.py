"""Speculative decoding of the default models from Python (docs/python.md).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/default_models.py            # decode a prompt
    PYTHONPATH=build/python /usr/bin/python3 examples/python/default_models.py --overhead # Python loop vs C++ loop

The second form times a Python loop that calls step() once per round
against generate(), the engine's own C++ loop, on the first 5 prose prompts
(docs/RESULTS.md, "Python").
"""
import argparse
import json
import time

import specdec


def tokens_per_second(decoder, prompts, stepped):
    decoder.generate(prompts[0], max_new_tokens=8)  # warm-up
    n, start = 0, time.perf_counter()
    for i, prompt in enumerate(prompts):
        if stepped:
            decoder.begin(i, prompt, max_new_tokens=64)
            while not decoder.done(i):
                decoder.step()
            n += len(decoder.take_result(i).tokens)
        else:
            n += len(decoder.generate(prompt, max_new_tokens=64).tokens)
    return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="models")
    ap.add_argument("--method", default="chain:k=4")
    ap.add_argument("--prompt", default="And God said unto Moses")
    ap.add_argument("--overhead", action="store_true")
    a = ap.parse_args()
    tok = specdec.Tokenizer.load(f"{a.models}/target/tokenizer.model")
    target = specdec.load(f"{a.models}/target", "bf16")
    draft = specdec.load(f"{a.models}/draft", "bf16")
    if not a.overhead:
        out = specdec.method(a.method, target, draft, dir=a.models).generate(tok.encode(a.prompt), max_new_tokens=64)
        print(a.prompt + tok.decode(out.tokens))
        print(f"{a.method}: {len(out.tokens)} tokens, {out.rounds} rounds, tau {out.tau:.2f}, stop: {out.stop_reason}")
        return
    with open("data/prompts/prose.jsonl") as f:
        prompts = [tok.encode(json.loads(line)["prompt"]) for line in f][:5]
    for _ in range(3):
        for spec in ("autoregressive", a.method):
            decoder = specdec.method(spec, target, draft, dir=a.models)
            c = tokens_per_second(decoder, prompts, stepped=False)
            p = tokens_per_second(decoder, prompts, stepped=True)
            print(f"{spec}: generate() {c:.1f} tok/s, python-stepped {p:.1f} tok/s, ratio {p / c:.2f}", flush=True)


if __name__ == "__main__":
    main()
