"""A CleanRL-style script on rlgrad against the same script on PyTorch: the file in tests/dropin/
runs as it is (imports of rlgrad), then with only its import lines pointed at torch, one run after
the other on the same machine, same seed. PyTorch runs twice: with its default threads and with
OMP_NUM_THREADS=1 (rlgrad picks one BLAS thread for training itself, see rlgrad/threads.py).

    python -m bench.dropin [--script ppo|dqn] [--steps 20000] [--repeats 2] [--compile]

``--compile`` adds the runs with the script's update under ``torch.compile`` (its ``--compile``
flag): ``rlgrad.compile`` traces it once and replays it, PyTorch's inductor compiles it (its
compilation time is in its steps/s, as rlgrad's tracing is in rlgrad's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {"ppo": ROOT / "tests" / "dropin" / "cleanrl_style_ppo.py",
           "dqn": ROOT / "tests" / "dropin" / "cleanrl_style_dqn.py"}

RUNNER = """
import json, sys, numpy as np
sys.path.insert(0, {folder!r})
import {module} as m
out = m.main(["--total-timesteps", "{steps}", "--seed", "{seed}"] + {extra!r})
r = out["episode_returns"]
print(json.dumps({{"sps": out["steps_per_second"], "last": float(np.mean(r[-10:]))}}))
"""


def to_torch(source: str) -> str:
    """The same script with its import lines naming torch instead of rlgrad (nothing else)."""
    lines = []
    for line in source.splitlines():
        if re.match(r"\s*(import|from)\s+rlgrad\b", line):
            line = re.sub(r"\brlgrad\b", "torch", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def run(folder: str, module: str, steps: int, seed: int, env: dict, extra: list[str]) -> dict:
    code = RUNNER.format(folder=folder, module=module, steps=steps, seed=seed, extra=extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", choices=sorted(SCRIPTS), default="ppo")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="also the runs with --compile")
    args = ap.parse_args()
    src = SCRIPTS[args.script]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"torch_{src.stem}.py").write_text(to_torch(src.read_text()))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        one = {**env, "OMP_NUM_THREADS": "1"}
        runs = {"rlgrad": (str(src.parent), src.stem, env, []),
                "torch": (tmp, f"torch_{src.stem}", env, []),
                "torch, 1 thread": (tmp, f"torch_{src.stem}", one, [])}
        if args.compile:
            runs.update({f"{name} --compile": (*spec[:3], ["--compile"])
                         for name, spec in list(runs.items())})
        results: dict[str, list[dict]] = {k: [] for k in runs}
        for _ in range(args.repeats):  # interleaved: the machine's load hits all alike
            for name, (folder, module, e, extra) in runs.items():
                results[name].append(run(folder, module, args.steps, args.seed, e, extra))
    print(f"{args.script}, {args.steps} steps, seed {args.seed}, {args.repeats} runs each (median)")
    print("| library | steps/s | last-10 return | rlgrad's speed-up |")
    print("|---|---|---|---|")
    med = {k: sorted(r["sps"] for r in v)[len(v) // 2] for k, v in results.items()}
    for name, rs in results.items():
        rets = ", ".join(f"{r['last']:.0f}" for r in rs)
        print(f"| {name} | {med[name]:.0f} | {rets} | {med['rlgrad'] / med[name]:.2f}x |")


if __name__ == "__main__":
    main()
