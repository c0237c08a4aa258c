"""``rlgrad demo`` (what ``make run`` runs): PPO on CartPole-v1 with its tuned preset, trained to
the maximum return of 500, evaluated over 20 episodes, and where to find the run and its curve."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from rlgrad.cli.run_dir import RunDir, default_run_dir

ENV_ID = "CartPole-v1"
ALGO = "ppo"
SOLVED = 475.0  # CartPole-v1's reward_threshold in Gymnasium's registry


def tensorboard_hint(logdir: Path) -> str:
    """How to see the run's event files: TensorBoard is not an rlgrad dependency (the event
    files are written by tensorboardX), so it is named with its install when it is missing."""
    run = f"tensorboard --logdir {logdir}"
    return run if importlib.util.find_spec("tensorboard") else f"pip install tensorboard && {run}"


def cmd_demo(seed: int, run_dir: str | None, steps: int | None, progress: bool) -> int:
    from rlgrad.cli.evaluate import evaluate_run
    from rlgrad.cli.train import cmd_train

    rd = RunDir(run_dir or default_run_dir(ENV_ID, ALGO, seed))
    print(f"rlgrad demo: PPO on {ENV_ID} (rl-baselines3-zoo's preset), seed {seed}")
    rc = cmd_train(ENV_ID, ALGO, seed, None, steps, None, [], str(rd.path), None, False, progress,
                   argv=["demo", "--seed", str(seed)], summary=False)
    if rc != 0:
        return rc
    print()
    _, _, mean, _ = evaluate_run(rd, episodes=20)
    if mean >= SOLVED:
        print(f"solved: mean return {mean:.1f} (the maximum is 500)")
    else:
        print(f"not solved: mean return {mean:.1f} < {SOLVED:g}", file=sys.stderr)
    print(f"run directory:  {rd.path}")
    print(f"learning curve: {rd.curve}")
    print(f"more: rlgrad eval {rd.path} --video cartpole.gif   |   {tensorboard_hint(rd.path.parent)}")
    return 0 if mean >= SOLVED else 1
