"""The compiled training loop's pieces (rlgrad.rl.compiled_loop.program) lowered to C by the
native backend, against the NumPy replay (the reference): the key streams' hashes and draws, the
functional environments' steps with their autoreset, the policy's sampling, GAE, the minibatch
order and gather, gradient clipping and Adam, and one whole update of PPO, A2C and REINFORCE
with a seed axis.

Tolerances (relative to the reference's largest magnitude, at least 1): integers, booleans and
keys bit for bit; float64 1e-9; float32 1e-5 for single ops, 1e-4 for a whole update (a few
hundred float32 ops in a row). The native program sums in another order than NumPy's pairwise
sums and calls glibc's math functions, not NumPy's SIMD ones: rounding, nothing more.
``RLGRAD_NATIVE_STRICT=1``: a lowering that disagrees with its trace raises here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad.native import build
from rlgrad.rl import A2C, PPO, REINFORCE
from rlgrad.rl.buffers import compute_gae_scan
from rlgrad.rl.compiled_loop import initial_state, loop_spec, schedule
from rlgrad.rl.compiled_loop import program as P
from rlgrad.rl.functional.keys import normal, split, uniform

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
TOL = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-5}


@pytest.fixture(autouse=True)
def _strict(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))


def same(fn: Callable, *args: Any, f32: float = TOL[np.dtype(np.float32)]) -> Any:
    """``fn`` jitted under both backends: floats within their tolerance, the rest bit for bit;
    returns the native result."""
    ref, nat = rlgrad.jit(fn, backend="numpy"), rlgrad.jit(fn, backend="native")
    with np.errstate(all="ignore"):
        want, got = ref(*args), nat(*args)
    assert nat.backend == "native"
    gl, wl = rlgrad.tree_util.tree_flatten(got)[0], rlgrad.tree_util.tree_flatten(want)[0]
    assert len(gl) == len(wl)
    for g, w in zip(gl, wl):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w)
            continue
        tol = f32 if w.dtype == np.float32 else TOL[w.dtype]
        finite = np.abs(w[np.isfinite(w)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)
    return got


def _keys(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Keys over all 64 bits (the hashes wrap modulo 2**64)."""
    return np.random.default_rng(seed).integers(0, 2**64, shape, dtype=np.uint64, endpoint=False)


def test_key_streams_bit_for_bit() -> None:
    keys = _keys((3, 4))
    same(lambda k: [*split(k), uniform(k, (5,)), uniform(k, (2, 3), np.float32)], keys)
    same(lambda k: [normal(k, (6,)), normal(k, (2,), np.float32)], keys)


def _model(algo: type, env_id: str, **kw: Any) -> Any:
    return algo(env_id, seed=0, compile_loop=True, **kw)


ENVS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]


@pytest.mark.parametrize("env_id", ENVS)
def test_environment_steps_with_autoreset(env_id: str) -> None:
    """``env_step`` on a batch of 2 seeds x 6 copies: the transition, reward, termination, time
    limit, and the first states drawn where a copy resets (``lax.cond`` taken)."""
    model = _model(PPO, env_id, n_envs=6, n_steps=8, batch_size=16)
    spec = loop_spec(model)
    env = initial_state([model, _model(PPO, env_id, n_envs=6, n_steps=8, batch_size=16)],
                        spec)["env"]
    rng = np.random.default_rng(1)
    env["state"] = env["state"] + rng.normal(0, 0.3, env["state"].shape)
    env["autoreset"] = rng.random((2, 6)) < 0.4
    env["steps"] = rng.integers(0, 600, (2, 6))
    if spec.discrete:
        action = rng.integers(0, model.action_space.n, (2, 6))
    else:
        action = rng.normal(0, 1.5, (2, 6) + spec.act_shape).astype(np.float32)
    same(lambda env, a: P.env_step(spec, env, a), env, action)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_sampling(env_id: str) -> None:
    """Categorical (inverse CDF on one uniform) and Gaussian sampling with log-probabilities."""
    model = _model(PPO, env_id, n_envs=2, n_steps=8, batch_size=16)
    spec = loop_spec(model)
    params = initial_state([model, model], spec)["params"]
    k = model.action_space.n if spec.discrete else spec.act_shape[0]
    out = np.random.default_rng(2).normal(0, 2, (2, 64, k)).astype(np.float32)
    same(lambda p, o, key: P._sample(spec, p, o, key), params, out, _keys((2,), 3))


def test_gae_scan() -> None:
    rng = np.random.default_rng(4)
    t, s, e = 33, 2, 3
    rewards, values, nxt = (rng.normal(size=(t, s, e)).astype(np.float32) for _ in range(3))
    term, dones = rng.random((t, s, e)) < 0.1, rng.random((t, s, e)) < 0.2
    same(lambda *a: compute_gae_scan(*a, 0.99, 0.95), rewards, values, nxt, term, dones | term)


def test_minibatch_order_and_gather() -> None:
    """The valid rows permuted by one uniform each (stable argsort), padded rows last, and the
    rows gathered per seed."""
    model = _model(PPO, "CartPole-v1", n_envs=4, n_steps=16, batch_size=16)
    spec = loop_spec(model)
    rng = np.random.default_rng(5)
    valid = rng.random((3, 64)) < 0.8
    n_valid = valid.sum(-1)
    x = rng.normal(size=(3, 64, 4)).astype(np.float32)

    def f(valid: Any, n_valid: Any, key: Any, x: Any) -> Any:
        order, key = P._order(spec, valid, n_valid, key)
        return order, key, P._take(x, order[:, :16])

    same(f, valid, n_valid, _keys((3,), 6), x)


def test_gradient_clipping_and_adam() -> None:
    model = _model(PPO, "CartPole-v1", n_envs=2, n_steps=16, batch_size=16, max_grad_norm=0.5)
    spec = loop_spec(model)
    rng = np.random.default_rng(7)
    p, g = (rng.normal(size=(3, 50)).astype(np.float32) for _ in range(2))
    g[1] *= 1e-3  # a seed under the norm: not scaled
    opt = {"step": np.array([0.0, 3.0, 10.0]), "m": rng.normal(size=(3, 50)).astype(np.float32),
           "v": rng.random((3, 50)).astype(np.float32)}
    same(lambda p, g, opt, lr: P._opt_step(spec, p, P._clip_grads(spec, g), opt, lr),
         p, g, opt, np.array(3e-4))


UPDATES = [
    (PPO, "CartPole-v1", dict(n_envs=4, n_steps=32, batch_size=48, n_epochs=2, ent_coef=0.01)),
    (PPO, "Pendulum-v1", dict(n_envs=2, n_steps=64, batch_size=32, n_epochs=2,
                              clip_range_vf=0.2)),
    (A2C, "Acrobot-v1", dict(n_envs=4, normalize_advantage=True)),
    (REINFORCE, "MountainCarContinuous-v0", dict(n_envs=2, n_steps=32)),
]


@pytest.mark.parametrize("algo, env_id, kw", UPDATES, ids=[f"{a.__name__}-{e}" for a, e, _ in UPDATES])
def test_one_whole_update_of_two_seeds(algo: type, env_id: str, kw: dict) -> None:
    """The compiled loop's program (rollout, GAE, epochs of minibatch steps) for 2 seeds."""
    models = [algo(env_id, seed=s, compile_loop=True, **kw) for s in (0, 1)]
    spec = loop_spec(models[0])
    sched = schedule(models[0], 10 * models[0].n_steps * models[0].n_envs)
    row = {k: np.array(v[0]) for k, v in sched.items()}
    same(P.make_program(spec), initial_state(models, spec), row, f32=1e-4)
