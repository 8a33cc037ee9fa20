#!/usr/bin/env python3
"""Writes data/prompts/agentic.jsonl: an agentic-style workload for the suffix
method (SuffixDecoding, arXiv 2411.04975, evaluates on agent loops whose
requests repeat structure). It is a self-refinement loop over code: for each
of the first 10 functions of data/prompts/code.jsonl (held-out Python from the
corpus), four requests in a row ask for the function again after an edit
step, each prompt holding the same scaffold, the function, and the first line
of the rewritten function. The target's outputs for one function then repeat
both its prompt (what the request's own index and prompt lookup see) and the
outputs of the earlier steps (what only the global index of earlier outputs
sees). Deterministic: rerunning rewrites the same file.

    python3 scripts/corpus/make_agentic_prompts.py
"""
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STEPS = ("rename nothing; keep the behaviour", "add no new imports", "keep the signature",
         "keep the assertions")


def main():
    with open(os.path.join(ROOT, "data/prompts/code.jsonl")) as f:
        functions = [json.loads(line) for line in f][:10]
    out = []
    for i, fn in enumerate(functions):
        body = fn["prompt"].rstrip("\n")
        first = body.split("\n", 1)[0]
        for step, rule in enumerate(STEPS, 1):
            prompt = (f"# agent: refactor, step {step} of {len(STEPS)}: {rule}\n"
                      f"# original:\n{body}\n\n# rewritten:\n{first}\n")
            out.append({"id": f"agentic-{i + 1:03d}-{step}", "task": "agentic", "prompt": prompt,
                        "source": f"{fn['source']} (scripts/corpus/make_agentic_prompts.py, step {step})"})
    with open(os.path.join(ROOT, "data/prompts/agentic.jsonl"), "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {len(out)} prompts")


if __name__ == "__main__":
    main()
