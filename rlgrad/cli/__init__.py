"""The ``rlgrad`` command line (also ``python -m rlgrad.cli``).

::

    rlgrad train ENV_ID --algo ppo [--preset NAME] [--steps N] [--seed S] [--n-envs N]
                 [--run-dir DIR] [--set key=value ...] [--checkpoint-every STEPS]
                 [--keep-checkpoints N]
    rlgrad resume RUN_DIR [--steps TOTAL] [--keep-checkpoints N]
    rlgrad eval RUN_DIR [--episodes 20] [--video FILE.gif|FILE.mp4]
    rlgrad plot RUN_DIR ... [-o FILE.png] [--key rollout/ep_rew_mean]
    rlgrad tune ENV_ID --algo ppo --samples K [--steps N] [--search optuna] [--scheduler asha]
                [--sweep-dir DIR] [--space FILE.yaml] [--resume] [--ray-address ADDR]
    rlgrad presets
    rlgrad bench [--quick] [--only NAME ...] [--goals]
    rlgrad demo                      # what `make run` runs: PPO on CartPole-v1 to 500

Bad input is one line on stderr and exit status 2, never a traceback (see ``errors``). Modules
are imported by the subcommand that needs them, so that a typo is answered at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlgrad.cli.errors import EXIT_USAGE, ArgumentParser, CLIError

if TYPE_CHECKING:
    from rlgrad.cli.env_ids import ModuleTrust

__all__ = ["main", "build_parser", "CLIError"]


def _whole_number(text: str) -> int:
    try:
        v = int(float(text)) if "e" in text.lower() else int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    return v


def _ray_arguments(p: argparse.ArgumentParser, runners: bool) -> None:
    if runners:
        p.add_argument("--env-runners", type=int, default=None, metavar="N",
                       help="sample on N Ray actors (n_envs is split among them; off-policy "
                       "algorithms asynchronously, Ape-X style; needs rlgrad[ray]); same as "
                       "--set env_runners=N")
        p.add_argument("--seeds", default=None, metavar="SEEDS",
                       help="train these seeds (0-4, 0,1,5) in parallel on Ray, each an "
                       "ordinary run under --run-dir/seed-S, plotted together")
        p.add_argument("--vectorize", action="store_true",
                       help="with --seeds: the seeds as one compiled program in this process "
                       "(compile_loop=True, PureJaxRL's vmap over seeds; functional envs only)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="the Ray cluster of a run with env runners (host:port of `ray start "
                   "--head`, or auto); default: a local Ray")
    p.add_argument("--ray-cpus", type=int, default=None, metavar="N",
                   help="CPUs of the local Ray started for the run (default: all of the "
                   "machine's)")


def _trust_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env-module", dest="env_modules", action="append", default=[],
                   metavar="MODULE", help="import MODULE (which registers the run's environment); "
                   "a module a run's config.yaml names is never imported on its own")
    p.add_argument("--trust-run", action="store_true", help="import the module of the run's "
                   "module:EnvId id (its code runs): only for runs you trust")


def _trust(args: argparse.Namespace) -> ModuleTrust:
    from rlgrad.cli.env_ids import ModuleTrust

    return ModuleTrust(tuple(args.env_modules), bool(args.trust_run))


def _tune_parser(sub: argparse._SubParsersAction) -> None:
    tu = sub.add_parser("tune", help="a hyperparameter sweep on Ray Tune: every trial a run "
                        "directory, results.csv best first and curves.png",
                        formatter_class=_RegistryHelp)
    tu.add_argument("env_id", metavar="ENV_ID")
    tu.add_argument("--algo", required=True, help=ALGO_HELP)
    tu.add_argument("--samples", type=int, required=True, metavar="K", help="number of trials")
    tu.add_argument("--steps", type=_whole_number, default=None,
                    help="budget of each trial in environment steps (default: the preset's)")
    tu.add_argument("--search", choices=("random", "optuna"), default="random")
    tu.add_argument("--scheduler", choices=("fifo", "asha"), default="fifo",
                    help="asha stops the worse trials early")
    tu.add_argument("--sweep-dir", default=None, metavar="DIR",
                    help="default runs/ENV__ALGO__sweep__TIMESTAMP")
    tu.add_argument("--space", default=None, metavar="FILE.yaml",
                    help="search space (default: rlgrad/presets/search/ALGO.yaml)")
    tu.add_argument("--preset", default=None, help="the preset the sampled values override")
    tu.add_argument("--seed", type=int, default=0, help="seed of every trial")
    tu.add_argument("--resume", action="store_true",
                    help="continue the interrupted sweep in --sweep-dir")
    tu.add_argument("--checkpoint-every", dest="checkpoint_every", type=_whole_number,
                    default=None, metavar="STEPS", help="each trial's checkpoint interval in "
                    "environment steps (default 10000): --resume continues trials from there")
    _ray_arguments(tu, runners=False)


class _RegistryHelp(argparse.HelpFormatter):
    """Writes the algorithm registry into a help text that says ``{algorithms}``, when the help
    is printed: building the parser imports no algorithm, so a typo is answered at once."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text and "{algorithms}" in text:
            from rlgrad.cli.build import algorithm_list

            text = text.replace("{algorithms}", algorithm_list())
        return text


ALGO_HELP = "one of {algorithms}"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="rlgrad", description="Train, resume, evaluate and plot deep-RL runs "
                       "built on rlgrad's autodiff engine.")
    p.add_argument("--version", action="store_true", help="print the versions and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)

    t = sub.add_parser("train", help="train an algorithm on a Gymnasium environment",
                       formatter_class=_RegistryHelp)
    t.add_argument("env_id", metavar="ENV_ID",
                   help="a registered Gymnasium id, e.g. CartPole-v1, or module:EnvId (the "
                   "module is imported first and registers EnvId, as gymnasium.make does)")
    t.add_argument("--algo", required=True, help=ALGO_HELP)
    t.add_argument("--preset", default=None, help="preset to use: an environment id of the "
                   "algorithm's presets, a YAML file, or 'none' (default: ENV_ID's preset if any)")
    t.add_argument("--steps", type=_whole_number, default=None,
                   help="training budget in environment steps (default: the preset's)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--n-envs", type=int, default=None, help="environment copies stepped together")
    t.add_argument("--run-dir", default=None,
                   help="where the run goes (default runs/ENV__ALGO__SEED__TIMESTAMP)")
    t.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hyperparameter (YAML value), e.g. --set n_steps=64 "
                   "--set policy_kwargs.net_arch=[64,64]; repeatable")
    t.add_argument("--checkpoint-every", "--checkpoint-interval", dest="checkpoint_every",
                   type=_whole_number, default=None, metavar="STEPS",
                   help="checkpoint interval in environment steps (default 10000)")
    t.add_argument("--keep-checkpoints", type=int, default=None, metavar="N",
                   help="checkpoints kept, newest first (default 2: a damaged newest one gives "
                   "way to the one before it)")
    t.add_argument("--no-buffer-in-checkpoint", dest="save_buffer", action="store_false",
                   help="leave the replay buffer out of checkpoints (smaller files; a resumed "
                   "off-policy run then refills it)")
    t.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar")
    _ray_arguments(t, runners=True)

    r = sub.add_parser("resume", help="continue a run from its last checkpoint")
    r.add_argument("run_dir", metavar="RUN_DIR")
    r.add_argument("--steps", type=_whole_number, default=None,
                   help="new total budget (default: the run's own)")
    r.add_argument("--keep-checkpoints", type=int, default=None, metavar="N",
                   help="checkpoints kept from now on (default: the run's own)")
    r.add_argument("--no-progress", dest="progress", action="store_false")
    _trust_arguments(r)
    _ray_arguments(r, runners=False)

    e = sub.add_parser("eval", help="mean and std of the return of a run's last checkpoint")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--episodes", type=int, default=20)
    e.add_argument("--video", default=None, metavar="FILE",
                   help="record one episode to FILE.gif (no extra install) or FILE.mp4 (ffmpeg)")
    e.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    e.add_argument("--seed", type=int, default=10_000, help="seed of the evaluation episodes")
    e.add_argument("--max-frames", type=int, default=2000, help="video length cap")
    _trust_arguments(e)

    pl = sub.add_parser("plot", help="learning curves of runs, mean and spread across seeds")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                    help="run directories, or folders of them (e.g. runs/)")
    pl.add_argument("-o", "--output", default=None, metavar="FILE.png",
                    help="default RUN_DIR/learning_curve.png for one run, else learning_curves.png")
    pl.add_argument("--key", default="rollout/ep_rew_mean", help="metric to plot")

    _tune_parser(sub)
    sub.add_parser("presets", help="list the algorithm and environment presets")

    b = sub.add_parser("bench", help="run the benchmarks of bench/ and print their tables")
    b.add_argument("--quick", action="store_true", help="shorter runs (where a script takes it)")
    b.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="only these benchmarks (engine, nn, gather, ...)")
    b.add_argument("--goals", action="store_true",
                   help="print the speed goals' table last recorded in docs/benchmarks.md and stop")

    d = sub.add_parser("demo", help="PPO on CartPole-v1 to a return of 500, evaluated "
                       "(what `make run` runs)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--run-dir", default=None)
    d.add_argument("--steps", type=_whole_number, default=None, help="default: the preset's")
    d.add_argument("--no-progress", dest="progress", action="store_false")
    return p


def cmd_presets() -> int:
    from rlgrad.cli.build import algorithms
    from rlgrad.rl.presets import list_presets

    have = algorithms()
    table = list_presets()
    width = max(len(a) for a in [*table, *have]) if table or have else 4
    print("algorithm presets (rlgrad train ENV_ID --algo ALGO uses ENV_ID's preset when listed):")
    for algo in sorted(set(table) | set(have)):
        note = "" if algo in have else "  (preset only: algorithm not available yet)"
        envs = ", ".join(table.get(algo, [])) or "no presets (class defaults)"
        print(f"  {algo:<{width}}  {envs}{note}")
    print("(atari: every Atari id, ALE/<Game>-v5 or <Game>NoFrameskip-v4; minatar: every "
          "MinAtar/<Game>-v1 id)")
    return 0


def _versions() -> str:
    from rlgrad.cli.run_dir import versions

    return "  ".join(f"{k} {v}" for k, v in versions().items())


def _ray_address(address: str | None, cpus: int | None = None) -> None:
    """Ray importable and the cluster address reachable (a probe of seconds), before any work;
    the address and the local Ray's CPUs reach ``ray.init`` through ``RAY_ADDRESS`` and
    ``RLGRAD_RAY_CPUS`` when the runners start."""
    import os

    from rlgrad.rl.distributed.cluster import CPUS_VAR, check_cpus, import_ray, probe

    try:
        import_ray()
        if address:
            probe(address)
        check_cpus(cpus)
    except (ImportError, ConnectionError, ValueError) as e:
        raise CLIError(str(e)) from None
    if address:
        os.environ["RAY_ADDRESS"] = address
    if cpus is not None:
        os.environ[CPUS_VAR] = str(cpus)


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    cmd = args.command
    if cmd == "train":
        from rlgrad.cli.train import cmd_train

        sets = list(args.sets)
        if args.env_runners is not None:
            if args.env_runners < 1:
                raise CLIError(f"--env-runners must be at least 1, got {args.env_runners}")
            sets.append(f"env_runners={args.env_runners}")
        if args.vectorize:
            if args.seeds is None:
                raise CLIError("--vectorize trains several seeds as one program: give --seeds "
                               "(e.g. --seeds 0-7)")
            from rlgrad.cli.vectorized import cmd_train_vectorized

            return cmd_train_vectorized(args, argv)
        if args.seeds is not None:
            from rlgrad.cli.seeds import cmd_train_seeds

            return cmd_train_seeds(args)
        if args.env_runners or args.ray_address or args.ray_cpus:
            _ray_address(args.ray_address, args.ray_cpus)
        return cmd_train(args.env_id, args.algo, args.seed, args.preset, args.steps, args.n_envs,
                         sets, args.run_dir, args.checkpoint_every, args.save_buffer,
                         args.progress, argv=argv, keep_checkpoints=args.keep_checkpoints)
    if cmd == "resume":
        from rlgrad.cli.train import cmd_resume

        if args.ray_address or args.ray_cpus:
            _ray_address(args.ray_address, args.ray_cpus)
        return cmd_resume(args.run_dir, args.steps, args.progress, args.keep_checkpoints,
                          _trust(args))
    if cmd == "eval":
        from rlgrad.cli.evaluate import cmd_eval

        return cmd_eval(args.run_dir, args.episodes, args.video, not args.stochastic, args.seed,
                        args.max_frames, _trust(args))
    if cmd == "plot":
        from rlgrad.cli.plot import cmd_plot

        return cmd_plot(args.run_dirs, args.output, args.key)
    if cmd == "tune":
        from rlgrad.cli.tune import cmd_tune

        return cmd_tune(args)
    if cmd == "presets":
        return cmd_presets()
    if cmd == "bench":
        from rlgrad.cli.bench import cmd_bench

        return cmd_bench(args.only, args.quick, args.goals)
    if cmd == "demo":
        from rlgrad.cli.demo import cmd_demo

        return cmd_demo(args.seed, args.run_dir, args.steps, args.progress)
    raise AssertionError(cmd)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 bad input,
    128+N stopped by signal N)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_versions())
        return 0
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return _dispatch(args, argv)
    except CLIError as e:
        print(f"rlgrad {args.command}: error: {e.message}", file=sys.stderr)
        return e.status
    except ConnectionError as e:  # Ray's node or cluster out of reach once training started
        print(f"rlgrad {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rlgrad {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlgrad presets | head`
        return 0
    except OSError as e:  # a full disk outside training (config.yaml of a new run, a plot)
        import errno

        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        from rlgrad.cli.train import disk_full

        print(f"rlgrad {args.command}: error: {disk_full(e)}", file=sys.stderr)
        return 1
