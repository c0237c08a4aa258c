"""The compiled training loop (rlgrad.rl.compiled_loop): equal to the eager algorithms for the
same seed and key streams, N seeds in one program equal to N programs, learning, refusals."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rlgrad.native import build
from rlgrad.rl import A2C, PPO, REINFORCE
from rlgrad.rl.compiled_loop import (
    initial_state,
    loop_spec,
    program_source,
    schedule,
    train_seeds,
    use_key_streams,
)
from rlgrad.rl.functional import CartPoleFunctional, FunctionalVectorEnv
from rlgrad.rl.functional.keys import ENV_STREAM, KeyBatch, KeyGenerator, seed_keys, split, uniform

# Parameters after a few updates: compiled vs eager, and the native program vs the NumPy replay.
# Only summation orders and libm's rounding differ (batched matmuls, masked means, glibc's exp),
# so the float32 parameters agree to a few ulps of their updates.
ATOL = 1e-6


@pytest.fixture(autouse=True)
def _native_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The loop's programs built in this session's cache; a lowering that disagrees with its
    trace raises (``RLGRAD_NATIVE_STRICT``) rather than falling back to the replay unseen."""
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))


def _params(model: object) -> list[np.ndarray]:
    return [np.array(p._value) for p in model.policy.parameters()]


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


# ---- the key-splitting generator ---------------------------------------------------------------
def test_key_generator_draws_what_the_batched_functions_draw() -> None:
    keys = seed_keys(np.arange(5), ENV_STREAM)
    batch = KeyBatch(keys.copy())
    drawn = batch.uniform(-1.0, 2.0, size=(3,))
    for i, k in enumerate(keys):
        g = KeyGenerator(k)
        np.testing.assert_array_equal(g.uniform(-1.0, 2.0, size=(3,)), drawn[i])
        assert g.key == batch.keys[i]


def test_uniforms_and_normals_have_their_moments() -> None:
    g = KeyGenerator.from_seed(0, 1)
    u = g.random(200_000)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.003 and abs(u.var() - 1 / 12) < 0.002  # 1/12: U(0,1)'s variance
    z = g.standard_normal(200_000)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    u32 = g.random(1000, dtype=np.float32)
    assert u32.dtype == np.float32 and u32.max() < 1.0


def test_split_children_differ_and_permutation_permutes() -> None:
    k = seed_keys(np.array([7]), 1)
    a, b = split(k)
    assert len({int(k[0]), int(a[0]), int(b[0])}) == 3
    assert not np.array_equal(uniform(a, (4,)), uniform(b, (4,)))
    p = KeyGenerator(k[0]).permutation(np.arange(10, 30))
    assert sorted(p.tolist()) == list(range(10, 30)) and p.tolist() != list(range(10, 30))


def test_vector_env_with_key_streams_starts_where_the_loop_starts() -> None:
    env = FunctionalVectorEnv(CartPoleFunctional(), 3, 500, key_rng=True)
    obs, _ = env.reset(seed=4)
    batch = KeyBatch(seed_keys(4 + np.arange(3), ENV_STREAM))
    np.testing.assert_array_equal(obs, np.asarray(CartPoleFunctional().initial(batch), np.float32))


# ---- compiled == eager ----------------------------------------------------------------------------
CASES = [
    (PPO, "CartPole-v1", 1024, dict(n_envs=4, n_steps=64, batch_size=48, n_epochs=3,
                                    learning_rate="lin_3e-4", ent_coef=0.01)),
    (PPO, "Pendulum-v1", 512, dict(n_envs=2, n_steps=128, batch_size=64, n_epochs=2)),
    (PPO, "Acrobot-v1", 512, dict(n_envs=2, n_steps=128, batch_size=64, n_epochs=2,
                                  clip_range_vf=0.2)),
    (A2C, "CartPole-v1", 400, dict(n_envs=4)),
    (A2C, "MountainCarContinuous-v0", 200, dict(n_envs=2, normalize_advantage=True)),
    (REINFORCE, "CartPole-v1", 1024, dict(n_envs=4, n_steps=64)),
    (PPO, "MountainCar-v0", 512, dict(n_envs=2, n_steps=128, batch_size=64, n_epochs=2)),
]


@pytest.mark.parametrize("algo, env_id, steps, kw", CASES,
                         ids=[f"{a.__name__}-{e}" for a, e, _, _ in CASES])
def test_compiled_loop_equals_the_eager_algorithm(algo: type, env_id: str, steps: int,
                                                  kw: dict) -> None:
    compiled = algo(env_id, seed=3, compile_loop=True, **kw)
    start = _params(compiled)
    compiled.learn(steps)
    eager = use_key_streams(algo(env_id, seed=3, vectorization_mode="functional", **kw))
    eager.learn(steps)
    assert compiled.num_timesteps == eager.num_timesteps
    moved = _max_diff(_params(eager), start)
    assert moved > 100 * ATOL  # the updates are much larger than the tolerance
    assert _max_diff(_params(compiled), _params(eager)) <= ATOL


@pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("algo, env_id, kw", [
    (PPO, "CartPole-v1", dict(n_envs=4, n_steps=64, batch_size=48, n_epochs=3, ent_coef=0.01)),
    (A2C, "Pendulum-v1", dict(n_envs=2, n_steps=16)),
], ids=["PPO-CartPole", "A2C-Pendulum"])
def test_native_program_equals_the_numpy_replay(algo: type, env_id: str, kw: dict,
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """compile_loop picks native code when the program lowers (``model.loop_backend``, a log
    line); the NumPy replay is its reference: the parameters of 2 seeds after 4 updates."""
    steps = 4 * kw["n_envs"] * kw["n_steps"]
    with caplog.at_level(logging.INFO, logger="rlgrad.rl"):
        native = train_seeds(algo, env_id, [0, 1], steps, **kw)
    assert all(m.loop_backend == "native" for m in native)
    assert any("as native code" in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("RLGRAD_JIT_BACKEND", "numpy")
    replay = train_seeds(algo, env_id, [0, 1], steps, **kw)
    assert all(m.loop_backend == "numpy" for m in replay)
    for a, b in zip(native, replay):
        assert _max_diff(_params(a), _params(b)) <= ATOL
        assert _max_diff(_params(a), _params(algo(env_id, seed=a.seed, **kw))) > 100 * ATOL
        np.testing.assert_array_equal(a.loop_returns[1], b.loop_returns[1])


def test_seeds_in_one_program_equal_one_program_per_seed() -> None:
    kw = dict(n_envs=2, n_steps=64, batch_size=32, n_epochs=2)
    together = train_seeds(PPO, "CartPole-v1", [0, 5, 9], 512, **kw)
    for m in together:
        alone = PPO("CartPole-v1", seed=m.seed, compile_loop=True, **kw)
        alone.learn(512)
        assert _max_diff(_params(m), _params(alone)) <= ATOL
        np.testing.assert_array_equal(m.loop_returns[1], alone.loop_returns[1])
    assert _max_diff(_params(together[0]), _params(together[1])) > 1e-3  # the seeds differ


def test_learn_again_goes_on_from_the_loop_state() -> None:
    kw = dict(n_envs=2, n_steps=32, batch_size=32, n_epochs=1)
    once = PPO("CartPole-v1", seed=1, compile_loop=True, **kw)
    once.learn(256)
    twice = PPO("CartPole-v1", seed=1, compile_loop=True, **kw)
    twice.learn(128)
    twice.learn(128, reset_num_timesteps=False)
    assert twice.num_timesteps == once.num_timesteps == 256
    assert _max_diff(_params(once), _params(twice)) <= ATOL


def test_learn_with_reset_num_timesteps_restarts_the_episodes_as_eager() -> None:
    """A second ``learn`` (reset_num_timesteps=True) resets the env copies, as SB3 does: first
    states from the copies' key streams, no episode carried over; the parameters, the optimizer
    and the algorithm's key go on. The eager run on the key streams resets the same way."""
    kw = dict(n_envs=2, n_steps=32, batch_size=32, n_epochs=1, learning_rate=1e-3)
    compiled = PPO("CartPole-v1", seed=1, compile_loop=True, **kw)
    eager = use_key_streams(PPO("CartPole-v1", seed=1, vectorization_mode="functional", **kw))
    for model in (compiled, eager):
        model.learn(128)
    before = dict(compiled._loop_state["env"])
    assert before["steps"].any()  # the episodes are under way when the first learn stops
    for model in (compiled, eager):
        model.learn(128)
    assert compiled.num_timesteps == eager.num_timesteps == 128
    assert _max_diff(_params(compiled), _params(eager)) <= ATOL
    # a run that went on instead (no reset) ends elsewhere
    went_on = PPO("CartPole-v1", seed=1, compile_loop=True, **kw)
    went_on.learn(128)
    went_on.learn(128, reset_num_timesteps=False)
    assert _max_diff(_params(went_on), _params(compiled)) > 100 * ATOL


def test_dqn_learn_with_reset_num_timesteps_restarts_the_episodes_as_eager() -> None:
    from rlgrad.rl import DQN

    kw = dict(n_envs=2, learning_starts=50, batch_size=16, train_freq=4, gradient_steps=2,
              buffer_size=500, target_update_interval=40, learning_rate=1e-3,
              policy_kwargs=dict(net_arch=[16]))
    compiled = DQN("CartPole-v1", seed=2, compile_loop=True, **kw)
    eager = use_key_streams(DQN("CartPole-v1", seed=2, vectorization_mode="functional", **kw))
    for model in (compiled, eager):
        model.learn(300)
        model.learn(200)
    assert compiled.num_timesteps == eager.num_timesteps == 200
    assert max(float(np.abs(np.asarray(a._value) - np.asarray(b._value)).max())
               for a, b in zip(compiled._params, eager._params)) <= ATOL


def test_compiled_ppo_learns_cartpole() -> None:
    """rlgrad's CartPole-v1 PPO preset, half its budget (50k steps, a second or two of CPU on
    native code): the deterministic evaluation far above an untrained policy's (~9), and the
    training episodes of the last 10 updates too (~22 untrained). Seeds 0-4 all evaluate 500
    there on both backends; the 5-seed check of the full runs is ``bench/purejaxrl.py
    --learning 0-4``."""
    from rlgrad.rl import evaluate, load_preset
    from rlgrad.rl.presets import split_preset

    hp, env = split_preset(load_preset("ppo", "CartPole-v1"))
    model = PPO("CartPole-v1", seed=0, compile_loop=True, n_envs=env["n_envs"], **hp)
    model.learn(env["n_timesteps"] // 2)
    ret_sum, n_done = model.loop_returns
    assert ret_sum[-10:].sum() / n_done[-10:].sum() > 300
    mean, _ = evaluate(model, n_episodes=10)
    assert mean >= 400


def test_program_source_shows_the_loops() -> None:
    model = PPO("CartPole-v1", seed=0, compile_loop=True, n_envs=2, n_steps=16, batch_size=16,
                n_epochs=1)
    spec = loop_spec(model)
    src = program_source(spec, initial_state([model], spec), schedule(model, 64))
    assert "def " in src and "scan" in src and "tanh" in src
    # the rollout, GAE, the epochs, the minibatches, the reset's two branches (the program is
    # one update, called once per update)
    assert src.count("# ---- loop ") == 6


def test_debug_flag_prints_the_program(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("RLGRAD_LOOP_DEBUG", "1")
    PPO("CartPole-v1", seed=0, compile_loop=True, n_envs=2, n_steps=16, batch_size=16,
        n_epochs=1).learn(32)
    err = capsys.readouterr().err
    assert err.startswith("# ---- the program (one update):")
    assert "# ---- loop 1: a rlgrad.lax.scan body" in err


# ---- refusals -------------------------------------------------------------------------------------
def test_a_gymnasium_env_is_refused_in_one_line() -> None:
    import gymnasium as gym

    with pytest.raises(ValueError, match="compile_loop=True.*CartPole-v1") as e:
        PPO(gym.make_vec("CartPole-v1", 2), compile_loop=True)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no functional form"):
        PPO("LunarLander-v3", compile_loop=True)


def test_callbacks_and_target_kl_are_refused() -> None:
    model = PPO("CartPole-v1", compile_loop=True, n_envs=2, n_steps=32, batch_size=32)
    with pytest.raises(ValueError, match="calls no callback"):
        model.learn(64, callback=lambda *a: True)
    with pytest.raises(ValueError, match="target_kl"):
        PPO("CartPole-v1", compile_loop=True, target_kl=0.01)
    with pytest.raises(ValueError, match="env_runners=0"):
        PPO("CartPole-v1", compile_loop=True, env_runners=2, n_envs=4)
    with pytest.raises(ValueError, match="normalize=True"):
        PPO("CartPole-v1", compile_loop=True, normalize=True)


# ---- the command line ------------------------------------------------------------------------------
def test_cli_vectorized_seeds_write_ordinary_runs(tmp_path: object, capsys: pytest.CaptureFixture
                                                  ) -> None:
    from rlgrad.cli import main
    from rlgrad.cli.plot import load_run

    out = tmp_path / "runs"  # type: ignore[operator]
    code = main(["train", "CartPole-v1", "--algo", "ppo", "--seeds", "0-1", "--vectorize",
                 "--steps", "1024", "--set", "n_envs=2", "--set", "n_steps=64",
                 "--set", "batch_size=64", "--set", "n_epochs=2", "--run-dir", str(out)])
    assert code == 0
    runs = [load_run(out / f"seed-{s}") for s in (0, 1)]
    assert all(r.steps[-1] == 1024 and len(r.values) > 0 for r in runs)
    assert all(r.config["hyperparams"]["compile_loop"] is True for r in runs)
    assert runs[0].values.tolist() != runs[1].values.tolist()  # two seeds, two runs
    assert "one compiled program" in capsys.readouterr().out


def test_cli_vectorize_needs_seeds(capsys: pytest.CaptureFixture) -> None:
    from rlgrad.cli import main

    assert main(["train", "CartPole-v1", "--algo", "ppo", "--vectorize"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--seeds" in err and "\n" not in err


def test_time_limit_truncations_bootstrap_as_eager() -> None:
    """A time limit of 12 steps: every episode of the run is truncated, bootstrapped from its
    final observation's value; compiled and eager still agree."""
    kw = dict(n_steps=64, batch_size=64, n_epochs=2, seed=3, learning_rate="lin_3e-4")
    compiled = PPO(FunctionalVectorEnv(CartPoleFunctional(), 4, 12), compile_loop=True, **kw)
    compiled.learn(1024)
    eager = use_key_streams(PPO(FunctionalVectorEnv(CartPoleFunctional(), 4, 12), **kw))
    eager.learn(1024)
    assert compiled.loop_returns[1].sum() > 50  # many episodes ended in the run
    assert _max_diff(_params(compiled), _params(eager)) <= ATOL
