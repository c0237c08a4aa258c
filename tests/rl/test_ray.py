"""Rollouts on Ray env runners (rlgrad.rl.distributed): the same numbers as a local run, learning
with two runners while one of them is killed, timeouts, signals, bad input.

Ray is started once for the module with 2 CPUs (the tests' machine has 2 cores); every test that
needs it is skipped, with its reason printed by ``pytest -rs``, only when Ray is not installed.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from rlgrad.rl import A2C, DQN, PPO, SAC
from rlgrad.rl.callbacks import BaseCallback
from rlgrad.rl.distributed import watchdog

ROOT = Path(__file__).resolve().parents[2]
try:
    import ray
except ImportError:
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason="Ray is not installed: pip install "
                               "'rlgrad[ray]' (make test installs it)")


@pytest.fixture(scope="module")
def local_ray():
    if ray is None:
        pytest.skip("Ray is not installed: pip install 'rlgrad[ray]' (make test installs it)")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    yield ray
    if started:
        ray.shutdown()


def _same_state(a, b) -> None:
    for name, m in a._modules().items():
        for (k, x), (_, y) in zip(m.state_dict().items(), b._modules()[name].state_dict().items(),
                                  strict=True):
            assert np.array_equal(x, y), f"{name}.{k}"


# ---- no Ray needed ----------------------------------------------------------------------------
def test_importing_rlgrad_does_not_import_ray():
    code = ("import sys, rlgrad, rlgrad.rl, rlgrad.cli, rlgrad.rl.distributed; "
            "from rlgrad.rl import PPO; PPO('CartPole-v1', n_envs=2, n_steps=8, batch_size=16, "
            "env_runners=2); print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # building with env_runners starts nothing either


def test_bad_env_runner_arguments_are_one_line():
    with pytest.raises(ValueError, match=r"env_runners=3, n_envs=2 is out of range: "
                       "env_runners <= n_envs"):
        PPO("CartPole-v1", n_envs=2, n_steps=8, batch_size=16, env_runners=3)
    with pytest.raises(ValueError, match="env_runners=-1 is out of range"):
        PPO("CartPole-v1", env_runners=-1)
    import gymnasium as gym

    with pytest.raises(ValueError, match="needs the environment as an id"):
        A2C(gym.make("CartPole-v1"), env_runners=1)


def test_split_and_normaliser_merge():
    from rlgrad.rl.distributed.sampler import batch_moments, split_envs
    from rlgrad.rl.normalize import RunningMeanStd

    assert split_envs(8, 3) == [3, 3, 2] and split_envs(2, 2) == [1, 1]
    rng = np.random.default_rng(0)
    start, a, b = rng.normal(size=(50, 3)), rng.normal(2, 3, (40, 3)), rng.normal(-1, 1, (7, 3))
    whole = RunningMeanStd((3,))
    for x in (start, a, b):
        whole.update(x)
    learner = RunningMeanStd((3,))
    learner.update(start)
    sent = learner.state_dict()
    for x in (a, b):  # each runner starts from the learner's statistics
        r = RunningMeanStd((3,))
        r.load_state_dict(sent)
        r.update(x)
        learner.update_from_moments(*batch_moments(sent, r.state_dict()))
    assert learner.count == pytest.approx(whole.count)
    np.testing.assert_allclose(learner.mean, whole.mean, rtol=1e-12)
    np.testing.assert_allclose(learner.var, whole.var, rtol=1e-10)


def test_cli_unreachable_address_is_one_line(tmp_path, capsys):
    from rlgrad.cli import main

    with socket.socket() as s:  # a port of this machine nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    rc = main(["train", "CartPole-v1", "--algo", "ppo", "--env-runners", "2", "--ray-address",
               f"127.0.0.1:{port}", "--run-dir", str(run)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not run.exists()
    assert err.count("\n") == 0
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in err and "ray start --head" in err
    assert main(["train", "CartPole-v1", "--algo", "ppo", "--env-runners", "0"]) == 2
    assert "--env-runners must be at least 1" in capsys.readouterr().err


@needs_ray
def test_cli_address_of_something_else_is_one_line_within_seconds(tmp_path, capsys):
    """A listener that is not Ray (here one that accepts and says nothing; ray.init would wait
    on it) fails the probe's gRPC handshake within its timeout, in one line."""
    from rlgrad.cli import main
    from rlgrad.rl.distributed import cluster

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        rc = main(["train", "CartPole-v1", "--algo", "ppo", "--env-runners", "2",
                   "--ray-address", f"127.0.0.1:{port}", "--run-dir", str(tmp_path / "run")])
        took = time.monotonic() - t0
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and took < cluster.PROBE_TIMEOUT_S + 5
    assert f"what listens at 127.0.0.1:{port} is not a Ray cluster" in err
    assert main(["train", "CartPole-v1", "--algo", "ppo", "--env-runners", "1",
                 "--ray-cpus", "0"]) == 2
    assert "--ray-cpus / RLGRAD_RAY_CPUS must be a whole number of CPUs of at least 1" in (
        capsys.readouterr().err)


def test_a_local_ray_that_times_out_at_startup_is_started_again(capsys):
    """Ray gives its local node a fixed 30 s to come up (a bare Exception after): on a loaded
    machine rlgrad starts it once more, then says it in one line."""
    from rlgrad.rl.distributed.cluster import _init

    class FakeRay:
        def __init__(self, failures: int) -> None:
            self.failures, self.inits, self.shutdowns = failures, 0, 0

        def init(self, **kw) -> None:
            self.inits += 1
            if self.inits <= self.failures:
                raise Exception("The current node timed out during startup. This could happen")

        def shutdown(self) -> None:
            self.shutdowns += 1

    once = FakeRay(1)
    _init(once, "local", {})
    assert (once.inits, once.shutdowns) == (2, 1)
    assert "did not start within 30 s; starting it again" in capsys.readouterr().err
    never = FakeRay(5)
    with pytest.raises(ConnectionError, match=r"did not start within 30 s, 2 times") as e:
        _init(never, "local", {})
    assert "\n" not in str(e.value) and never.inits == 2
    with pytest.raises(Exception, match="timed out"):  # a cluster's address: not retried
        _init(FakeRay(1), "10.0.0.1:6379", {})


# ---- on a local Ray -------------------------------------------------------------------------
@needs_ray
@pytest.mark.parametrize("env_id, normalize", [("CartPole-v1", False), ("Pendulum-v1", True)])
def test_one_runner_is_the_local_run(local_ray, env_id, normalize):
    """Runner 0 holds every copy, seeded as the local run seeds them, and draws from the
    algorithm's own random stream: A2C (no minibatch shuffling in the learner) gives the very
    same weights, rollout, normaliser and episode statistics as without runners."""
    kw = dict(seed=3, n_envs=4, n_steps=16, normalize=normalize)
    local, remote = A2C(env_id, **kw), A2C(env_id, env_runners=1, **kw)
    try:
        local.learn(16 * 4 * 6)
        remote.learn(16 * 4 * 6)
        _same_state(local, remote)
        for f in ("observations", "actions", "rewards", "advantages", "returns", "valid"):
            assert np.array_equal(getattr(local.rollout_buffer, f),
                                  getattr(remote.rollout_buffer, f)), f
        if normalize:
            for k in ("obs_rms", "ret_rms"):
                a, b = getattr(local.normalizer, k), getattr(remote.normalizer, k)
                assert np.array_equal(a.mean, b.mean) and np.array_equal(a.var, b.var)
                assert a.count == b.count
        assert list(local._ep_stats.return_queue) == list(remote._ep_stats.return_queue)
        assert local.num_timesteps == remote.num_timesteps == 16 * 4 * 6
    finally:
        remote.close_env_runners()


@needs_ray
def test_resumed_run_with_runners_is_the_uninterrupted_one(local_ray, tmp_path):
    """A checkpoint holds the runners' environments and action streams: a run saved after 2
    iterations and loaded into a new learner (new runners) ends as the uninterrupted run, bit
    for bit (PPO: the minibatch order comes from the learner's own stream, also saved)."""
    kw = dict(seed=1, n_envs=4, n_steps=16, batch_size=32, n_epochs=2, env_runners=2)
    whole, part = PPO("CartPole-v1", **kw), PPO("CartPole-v1", **kw)
    try:
        whole.learn(64 * 4)
        part.learn(64 * 2)
        part.save(str(tmp_path / "ckpt.safetensors"))
    finally:
        whole.close_env_runners()
        part.close_env_runners()
    resumed = PPO.load(str(tmp_path / "ckpt.safetensors"))
    try:
        resumed.learn(64 * 2, reset_num_timesteps=False)
        _same_state(whole, resumed)
        assert list(whole._ep_stats.return_queue) == list(resumed._ep_stats.return_queue)
    finally:
        resumed.close_env_runners()


class _KillRunner(BaseCallback):
    """SIGKILLs runner 0's process shortly after iteration ``at`` ends (mid-rollout, mostly)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.iterations, self.killed = at, 0, None

    def on_iteration_end(self) -> bool:
        self.iterations += 1
        if self.iterations == self.at:
            sampler = self.model._sampler
            pid = ray.get(sampler.runners[0].pid.remote())
            threading.Timer(0.05, os.kill, (pid, signal.SIGKILL)).start()
            self.killed = pid
        return True


@needs_ray
def test_ppo_two_runners_reach_the_presets_score_while_one_is_killed(local_ray):
    """CartPole's preset with 2 runners (4 copies each) for its whole budget (100k steps, about
    20 s): runner 0's process is killed mid-training; Ray restarts it, its partial rollout is
    dropped, one line says so, every iteration is whole, and the policy still reaches the
    preset's score (500; asserted: CartPole-v1's threshold, 475, over 20 deterministic
    episodes)."""
    from rlgrad.rl.evaluation import evaluate_policy

    model = PPO("CartPole-v1", seed=0, n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8,
                gamma=0.98, n_epochs=20, learning_rate="lin_1e-3", clip_range="lin_0.2",
                env_runners=2)
    cb = _KillRunner(at=30)
    try:
        model.learn(100_000, callback=cb)
        sampler = model._sampler
        assert cb.killed is not None
        # killed mid-rollout (the call fails: the rollout is dropped) or just before one (Ray
        # restarted it before the call ran: nothing lost); either way one restart, logged
        assert sampler.restarts == [1, 0], sampler.events
        assert len(sampler.events) == 1
        assert ("env runner 0 died" in sampler.events[0]
                or "env runner 0 was restarted by Ray" in sampler.events[0]), sampler.events
        assert ray.get(sampler.runners[0].pid.remote()) != cb.killed  # a new process
        assert model.num_timesteps == 100_096  # whole iterations of 8 x 32 steps
        assert model.logger.history[-1]["env_runners/restarts"] == 1
    finally:
        model.close_env_runners()
    mean, _ = evaluate_policy(model, "CartPole-v1", n_eval_episodes=20, deterministic=True)
    assert mean >= 475, mean


@needs_ray
def test_runner_killed_during_a_rollout(local_ray, tmp_path):
    """A runner's process dies in the middle of a rollout (its environment SIGKILLs it at the
    first step after a file appears): the call fails, the partial rollout is dropped, one line
    says so, Ray restarts the runner and the iteration completes with a whole rollout."""
    die = tmp_path / "die"
    model = PPO("tests.ray_envs:DyingCartPole-v0", seed=0, n_envs=2, n_steps=16,
                batch_size=32, env_runners=2, env_kwargs={"die_file": str(die)})
    try:
        model.learn(32)  # starts the runners
        sampler = model._sampler
        pids = list(sampler.pids)
        die.touch()
        model.learn(64, reset_num_timesteps=False)
        assert not die.exists() and sum(sampler.restarts) == 1
        i = sampler.restarts.index(1)
        assert len(sampler.events) == 1
        assert f"env runner {i} died" in sampler.events[0]  # Ray's error class is named too
        assert "its partial rollout is dropped and it samples again" in sampler.events[0]
        assert sampler.pids[i] != pids[i] and sampler.pids[1 - i] == pids[1 - i]
        assert model.num_timesteps == 96 and model.rollout_buffer.valid.shape == (16, 2)
    finally:
        model.close_env_runners()


@needs_ray
def test_hung_runner_is_killed_after_the_timeout(local_ray):
    """A runner that stops answering (SIGSTOP) is killed when ``timeout_s`` is up and restarted:
    the driver never waits without a bound."""
    model = PPO("CartPole-v1", seed=0, n_envs=2, n_steps=16, batch_size=32, env_runners=2)
    try:
        model.learn(32)  # starts the runners
        sampler = model._sampler
        sampler.timeout_s = 3.0
        pid = ray.get(sampler.runners[1].pid.remote())
        os.kill(pid, signal.SIGSTOP)
        model.learn(64, reset_num_timesteps=False)
        assert sampler.restarts == [0, 1]
        assert "gave no rollout within 3 s and was killed" in sampler.events[0]
        assert model.num_timesteps == 96
    finally:
        model.close_env_runners()


@needs_ray
def test_more_runners_than_cpus_warns(local_ray):
    from rlgrad.rl.distributed.cluster import runner_cpus

    said: list[str] = []
    share = runner_cpus(5, said.append)
    assert share <= 2 / 5
    assert len(said) == 1 and "5 env runners but the Ray cluster has" in said[0]


@needs_ray
def test_dqn_on_runners_apex_with_a_bounded_policy_lag(local_ray, monkeypatch):
    """Off-policy, asynchronous: the runners' transitions reach the replay buffer (all of them
    but the NEXT_STEP reset rows), counters and episodes add up, DQN's target sync and epsilon
    follow the learner's steps, and with ``max_policy_lag = 0`` every rollout used for learning
    was sampled with the learner's newest weights (the older ones dropped and counted)."""
    from rlgrad.rl.distributed.apex import ApexSampler

    monkeypatch.setattr(ApexSampler, "max_policy_lag", 0)
    model = DQN("CartPole-v1", seed=0, n_envs=2, learning_starts=200, buffer_size=5000,
                target_update_interval=100, exploration_fraction=0.5, env_runners=2)
    try:
        model.learn(1500)
        s, last = model._sampler, model.logger.history[-1]
        assert last["env_runners/policy_lag_max"] == 0 and s.stale_dropped > 0
        received = model.num_timesteps + s._credit
        episodes = model._ep_stats.episode_count
        # the reset rows left out: one per episode that ended (also in the dropped rollouts)
        assert 0 < received - model.replay_buffer.size() <= episodes + 10 * s.stale_dropped
        assert model._episode_num == episodes > 0
        assert model._n_calls == model.num_timesteps // model.n_envs  # _on_step per vector step
        assert model.exploration_rate == pytest.approx(model.exploration_schedule(
            model._current_progress_remaining))
    finally:
        model.close_env_runners()


@needs_ray
def test_apex_runner_killed_during_a_rollout(local_ray, tmp_path):
    """Ape-X's faults: a runner that dies mid-rollout is restarted once, logged once, and the
    learner keeps taking the other runner's rollouts meanwhile."""
    die = tmp_path / "die"
    model = DQN("tests.ray_envs:DyingCartPole-v0", seed=0, n_envs=2, learning_starts=100,
                buffer_size=5000, env_runners=2, env_kwargs={"die_file": str(die)})
    try:
        model.learn(200)
        s = model._sampler
        die.touch()
        model.learn(600, reset_num_timesteps=False)  # the other runner's rollouts go on
        assert not die.exists() and model.num_timesteps >= 800
        end = time.monotonic() + 120  # the failed call is seen when Ray has reported it
        while not sum(s.restarts) and time.monotonic() < end:  # (slow on a loaded host)
            model.learn(100, reset_num_timesteps=False)
        assert sum(s.restarts) == 1 and len(s.events) == 1, s.events
        assert "died" in s.events[0] or "was restarted by Ray" in s.events[0]
    finally:
        model.close_env_runners()


@needs_ray
def test_sac_on_runners_learns_from_their_transitions(local_ray):
    model = SAC("Pendulum-v1", seed=0, n_envs=2, learning_starts=100, buffer_size=2000,
                normalize=True, env_runners=2)
    try:
        model.learn(400)
        s = model._sampler
        assert model.num_timesteps >= 400 and model._n_updates > 0
        # one gradient step per vector step of the learner's 2 copies, as locally (each runner's
        # piece is one step of its 1 copy: two pieces per train_freq)
        assert abs(model._n_updates - (model.num_timesteps - 100) / 2) <= 2, model._n_updates
        # every transition the runners sent, but the reset rows after an episode's end
        lost = model.num_timesteps + s._credit - model.replay_buffer.size()
        assert 0 <= lost <= model._ep_stats.episode_count
        assert model.normalizer.obs_rms.count > 400  # the runners' observations were merged
        assert s._lags and max(s._lags) <= s.max_policy_lag  # logged at the episode dumps
    finally:
        model.close_env_runners()


@needs_ray
def test_resumed_apex_run_is_the_uninterrupted_one(local_ray, tmp_path):
    """Ape-X with one runner is repeatable (the runner is sent off again when its fragment is
    taken, with the weights of that moment), so a checkpoint that holds the runner's state, the
    fragment in flight, the pieces not used yet, the replay buffer and the lag counters resumes
    as the uninterrupted run, number for number: SAC on Pendulum, fragments of 4 steps."""
    kw = dict(seed=2, n_envs=2, learning_starts=64, buffer_size=4000, batch_size=32,
              policy_kwargs={"net_arch": [32, 32]}, env_runners=1)
    whole, part = SAC("Pendulum-v1", **kw), SAC("Pendulum-v1", **kw)
    try:
        whole.learn(400)
        whole_lags = list(whole._sampler._lags)
        part.learn(200)
        s = part._sampler
        assert s.calls == 8 and s._inflight  # 16 steps of 2 copies per call; one in flight
        part.save(str(tmp_path / "ckpt.safetensors"), include_replay_buffer=True)
        assert s._ready and not s._inflight  # the fragment in flight is kept, not lost
        held = part._sampler.get_state()
    finally:
        whole.close_env_runners()
        part.close_env_runners()
    assert len(held["pieces"]) + 8 * len(held["ready"]) > 0
    resumed = SAC.load(str(tmp_path / "ckpt.safetensors"))
    try:
        resumed.learn(200, reset_num_timesteps=False)
        _same_state(whole, resumed)
        for k in ("observations", "actions", "rewards"):
            assert np.array_equal(getattr(whole.replay_buffer, k),
                                  getattr(resumed.replay_buffer, k)), k
        assert list(whole._ep_stats.return_queue) == list(resumed._ep_stats.return_queue)
        assert resumed._sampler._lags == whole_lags  # the lag counters went on
        assert whole.num_timesteps == resumed.num_timesteps == 400
    finally:
        resumed.close_env_runners()


def _marked(mark: str) -> list[int]:
    """Pids of the processes whose environment holds ``mark`` (a run's Ray processes too)."""
    pids = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and mark.encode() in (p / "environ").read_bytes():
                pids.append(int(p.name))
        except OSError:
            continue
    return pids


@needs_ray
@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc to find the run's processes")
def test_sigterm_checkpoints_and_leaves_no_ray_process(tmp_path, local_ray):
    mark = f"RLGRAD_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1], "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "rlgrad.cli", "train", "CartPole-v1",
                             "--algo", "ppo", "--env-runners", "2", "--run-dir", str(run),
                             "--no-progress", "--checkpoint-every", "100000", "--ray-cpus", "2"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        metrics = run / "metrics.csv"
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) > 3:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        assert len(_marked(mark)) > 2  # the driver, Ray's own processes, the runners
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "SIGTERM: stopped at step" in err and "with a checkpoint" in err
    assert (run / "checkpoint.safetensors").exists()
    left = _marked(mark)
    for _ in range(40):  # Ray's processes may take a moment to exit after the driver
        if not left:
            break
        time.sleep(0.25)
        left = _marked(mark)
    assert left == []


def test_parse_seeds():
    from rlgrad.cli.errors import CLIError
    from rlgrad.cli.seeds import parse_seeds

    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0-2,9") == [0, 1, 2, 9] and parse_seeds("7") == [7]
    for bad in ("a-b", "1,1", "", "3-1,"):
        with pytest.raises(CLIError, match="--seeds"):
            parse_seeds(bad)


@needs_ray
def test_cli_seeds_in_parallel(local_ray, tmp_path, capsys):
    """``--seeds 0-1``: two ordinary run directories (each resumable on its own) trained on Ray
    at once, and one plot of both."""
    from rlgrad.cli import main
    from rlgrad.cli.run_dir import RunDir

    parent = tmp_path / "sweep"
    rc = main(["train", "CartPole-v1", "--algo", "ppo", "--seeds", "0-1", "--steps", "1024",
               "--run-dir", str(parent)])
    out = capsys.readouterr().out
    assert rc == 0, out
    for s in (0, 1):
        rd = RunDir(parent / f"seed-{s}")
        assert rd.read_config()["seed"] == s
        assert rd.checkpoint.exists() and rd.read_metrics()
        assert f"seed {s}: exit status 0" in out
    assert (parent / "learning_curves.png").stat().st_size > 0


@needs_ray
def test_seed_signal_reaches_a_process_on_another_node(local_ray):
    """``--seeds``' Ctrl-C reaches a seed on another machine by a task pinned to its node (no
    cancellation, which would stop it without a checkpoint): here the node is this one, taken
    for another."""
    from rlgrad.cli.seeds import _pass_on

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        node = ray.get_runtime_context().get_node_id()
        ref = _pass_on(ray, node, proc.pid, signal.SIGTERM, here="another node")
        assert ref is not None
        ray.get(ref, timeout=60)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()


def _ray_env() -> tuple[str, dict[str, str]]:
    """A mark for a subprocess's environment (its Ray's processes inherit it), and that env."""
    mark = f"RLGRAD_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1], "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    return mark, env


def _gone(mark: str, seconds: float) -> list[int]:
    """The marked processes still alive after up to ``seconds``."""
    end = time.monotonic() + seconds
    left = _marked(mark)
    while left and time.monotonic() < end:
        time.sleep(0.25)
        left = _marked(mark)
    return left


@needs_ray
@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc to find the run's processes")
def test_cli_more_seeds_than_cpus_queue_and_finish(tmp_path):
    """``--seeds 0-2`` on 2 CPUs: two seeds run, the third waits for a CPU and then runs (it
    used to wait forever, with no output, for all three to start), each start and end said."""
    mark, env = _ray_env()
    parent = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "rlgrad.cli", "train", "CartPole-v1", "--algo",
                           "ppo", "--seeds", "0-2", "--steps", "256", "--set", "n_steps=128",
                           "--ray-cpus", "2", "--run-dir", str(parent)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "3 seeds (0-2) on Ray, 2 at a time, the rest queued" in out
    for s in (0, 1, 2):
        assert f"seed {s}: started" in out and f"seed {s}: exit status 0" in out
        assert (parent / f"seed-{s}" / "checkpoint.safetensors").exists()
    assert "(3/3 done)" in out
    for noise in ("\x1b[", "pid=", "repeated"):  # the seeds' output is in their logs
        assert noise not in out + proc.stderr, noise
    assert "learning curve:" in (parent / "seed-2.log").read_text()
    assert _gone(mark, 10) == []


def test_a_failed_seed_is_said_with_its_last_line(tmp_path, capsys):
    from rlgrad.cli.seeds import _SeedQueue

    class NoRay:
        def remote(self, cls):
            return self

        def options(self, **kwargs):
            return self

        def kill(self, actor):
            pass

    (tmp_path / "seed-3.log").write_text("run directory: x\nrlgrad train: error: no disk\n\n")
    q = _SeedQueue(NoRay(), {3: {"run_dir": str(tmp_path / "seed-3")},
                             4: {"run_dir": str(tmp_path / "seed-4")}}, 1)
    q._end(3, 2)
    q._end(4, 0)
    assert capsys.readouterr().out.splitlines() == [
        f"seed 3: finished, exit status 2: rlgrad train: error: no disk (all of it in "
        f"{tmp_path / 'seed-3.log'}) (1/2 done)", "seed 4: finished, exit status 0 (2/2 done)"]


@needs_ray
@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc to find the run's processes")
def test_kill_9_of_the_driver_takes_its_local_ray_down():
    """A driver that started a local Ray killed with SIGKILL: its Ray processes (the raylet's
    DashboardAgent and RuntimeEnvAgent included) are gone within a few seconds. The processes
    are found by ancestry as well as by the mark: an agent that sets its title may overwrite its
    environment block, and the mark with it (the watchdog's docstring). A child of the driver
    that is not Ray's is left alone."""
    mark, env = _ray_env()
    code = ("from rlgrad.rl.distributed.cluster import connect; import ray, subprocess, time\n"
            "other = subprocess.Popen(['sleep', '120'])\n"
            "connect(None, 2)\n"
            "@ray.remote(num_cpus=1)\n"
            "class Busy:\n"
            "    def ok(self): return 1\n"
            "    def spin(self):\n"
            "        while True: sum(range(10**6))\n"
            "b = Busy.remote(); ray.get(b.ok.remote()); b.spin.remote(); time.sleep(2)\n"
            "print(other.pid, flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    other = None
    try:
        other = int(proc.stdout.readline())
        below = {p for p in _descendants(proc.pid) if p[0] != other}
        # whole command lines: cut short, a long checkout path hides the program's name
        names = " ".join(_cmdline(p) for p, _ in below)
        # the GCS, the raylet, its agents, the busy actor (and the watchdog, which ends itself)
        assert len(below) > 4 and "gcs_server" in names and "raylet" in names, names
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # before: the agents lived on for 15 s and more; 12 s leaves room for a loaded machine (8 s
    # failed once at load average 10, with other test runs on the same 2 cores)
    end = time.monotonic() + 12
    while (_marked(mark) or watchdog.alive(below, watchdog.processes())) and time.monotonic() < end:
        time.sleep(0.25)
    left = set(_marked(mark)) - {other} | watchdog.alive(below, watchdog.processes())
    try:
        assert left == set(), [_cmdline(p) for p in left]
        assert "sleep" in _cmdline(other)  # not Ray's: alive
    finally:
        os.kill(other, signal.SIGKILL)


def _descendants(pid: int) -> set[tuple[int, int]]:
    """(pid, start time) of every process below ``pid``."""
    table = watchdog.processes()
    found, stack = set(), [pid]
    while stack:
        parent = stack.pop()
        for child, (ppid, start) in table.items():
            if ppid == parent:
                found.add((child, start))
                stack.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"{pid} (gone)"
