"""The functional classic-control environments (``rlgrad.rl.functional``) against Gymnasium's own:
the same observations, rewards, terminations and truncations, bit for bit, over seeds and random
actions (autoresets and time limits included), from chosen states (walls, goals), one copy and
vectors; and a PPO run on them equal to one on Gymnasium's ``SyncVectorEnv``."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import rlgrad
from rlgrad.rl import PPO, make_vec_env
from rlgrad.rl.functional import FUNCTIONAL_ENVS

IDS = list(FUNCTIONAL_ENVS)
#: where the numbers may differ by float32 rounding, (env, what) -> tolerance. MountainCarContinuous:
#: Gymnasium steps a fresh episode's first state in float64, later ones in float32; the functional
#: form keeps float32 throughout. Pendulum's reward: Gymnasium squares the float32 torque as a NumPy
#: scalar (``u**2``), which differs from the array square by a float32 ulp for about 0.1% of values.
TOLERANCE = {("MountainCarContinuous-v0", "obs"): 1e-6, ("MountainCarContinuous-v0", "reward"): 1e-6,
             ("Pendulum-v1", "reward"): 1e-9}


def _actions(space: gym.Space, rng: np.random.Generator, n: int, steps: int) -> list[np.ndarray]:
    """Random actions for ``n`` copies; continuous ones also outside the bounds (clipped)."""
    if isinstance(space, gym.spaces.Discrete):
        return [rng.integers(0, space.n, size=n) for _ in range(steps)]
    wide = 1.5 * space.high
    return [rng.uniform(-wide, wide, size=(n, *space.shape)).astype(np.float32)
            for _ in range(steps)]


def _assert_same(ours: tuple, theirs: tuple, env_id: str, step: int) -> None:
    for name, a, b in zip(("obs", "reward", "terminated", "truncated"), ours, theirs):
        assert np.asarray(a).dtype == np.asarray(b).dtype, (env_id, step, name)
        tol = TOLERANCE.get((env_id, name), 0.0)
        if tol:
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{env_id} {step} {name}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{env_id} step {step}: {name}")


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("seed", [0, 7])
def test_vector_env_equals_gymnasiums_sync_vector_env(env_id, seed):
    """Four copies for 600 steps (past each time limit but MountainCarContinuous's 999): every
    number equal, autoresets on the next step and truncations included."""
    theirs = gym.make_vec(env_id, num_envs=4, vectorization_mode="sync")
    ours = make_vec_env(env_id, n_envs=4, vectorization_mode="functional",
                        record_statistics=False)
    assert type(ours).__name__ == "FunctionalVectorEnv"
    tol = TOLERANCE.get((env_id, "obs"), 0.0)
    np.testing.assert_allclose(ours.reset(seed=seed)[0], theirs.reset(seed=seed)[0], rtol=tol)
    rng = np.random.default_rng(seed)
    ends = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's checker on out-of-bounds actions
        for t, a in enumerate(_actions(theirs.single_action_space, rng, 4, 600)):
            mine, gyms = ours.step(a), theirs.step(a)
            _assert_same(mine[:4], gyms[:4], env_id, t)
            ends += int(gyms[2].sum() + gyms[3].sum())
    assert ends > 0 or env_id == "MountainCarContinuous-v0"  # episodes did end and restart


STATES = {  # Gymnasium's state -> what it exercises
    "CartPole-v1": [[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.2, 2.0], [-2.39, -1.0, -0.2, -2.0]],
    "Acrobot-v1": [[3.1, 3.1, 12.0, 28.0], [-3.1, -3.1, -12.0, -28.0], [0.0, np.pi, 0.0, 0.0],
                   [np.pi - 0.01, 0.0, 12.5, -28.2]],
    "MountainCar-v0": [[-1.199, -0.07], [0.499, 0.07], [0.0, 0.07], [0.59, 0.069]],
    "MountainCarContinuous-v0": [[-1.199, -0.07], [0.449, 0.07], [0.0, 0.07]],
    "Pendulum-v1": [[np.pi, 8.0], [-np.pi, -8.0], [7.0, 0.0], [0.0, 0.0]],
}


@pytest.mark.parametrize("env_id", IDS)
def test_transition_from_chosen_states(env_id):
    """From states random play rarely reaches (the walls, the goal, the speed limits, angles to
    wrap), each action: the next observation, reward and termination equal Gymnasium's."""
    func = FUNCTIONAL_ENVS[env_id][0]()
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    space = env.action_space
    actions = ([np.int64(a) for a in range(space.n)] if isinstance(space, gym.spaces.Discrete)
               else [np.array([v], np.float32) for v in (-3.0, -1.0, -0.3, 0.0, 0.7, 1.0, 2.5)])
    dtype = np.float32 if env_id == "MountainCarContinuous-v0" else np.float64
    for state in STATES[env_id]:
        for a in actions:
            env.state = np.array(state, dtype=dtype)
            env.steps_beyond_terminated = None  # CartPole: as after a reset
            obs, reward, terminated, _, _ = env.step(a)
            s = np.array(state, dtype=dtype)
            nxt = func.transition(s, a)
            np.testing.assert_array_equal(func.observation(nxt), obs, err_msg=f"{state} {a}")
            tol = TOLERANCE.get((env_id, "reward"), 0.0)
            assert abs(float(func.reward(s, a, nxt)) - reward) <= tol, (state, a)
            assert bool(func.terminal(nxt)) == terminated, (state, a)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "Pendulum-v1"])
def test_one_copy_equals_gym_make(env_id):
    """``gym.make('rlgrad/<id>')``: one copy, the same episode as ``gym.make(id)``'s, the time
    limit from the registration."""
    ours, theirs = gym.make(f"rlgrad/{env_id}"), gym.make(env_id)
    np.testing.assert_array_equal(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])
    theirs.action_space.seed(3)
    for t in range(250):
        a = theirs.action_space.sample()
        o1, r1, d1, u1, _ = ours.step(a)
        o2, r2, d2, u2, _ = theirs.step(a)
        np.testing.assert_array_equal(o1, o2)
        assert abs(r1 - r2) <= TOLERANCE.get((env_id, "reward"), 0.0), t
        assert (d1, u1) == (d2, u2), t
        if d1 or u1:
            ours.reset(seed=t)
            theirs.reset(seed=t)


def test_ppo_on_the_functional_env_equals_ppo_on_sync():
    """The same seed: PPO's parameters after 512 steps are the same bits on the functional
    vector env as on Gymnasium's SyncVectorEnv of CartPole (every rollout equal)."""
    kw = dict(seed=0, n_envs=4, n_steps=64, batch_size=64, n_epochs=2)
    a = PPO("MlpPolicy", "CartPole-v1", vectorization_mode="functional", **kw).learn(512)
    b = PPO("MlpPolicy", "CartPole-v1", vectorization_mode="sync", **kw).learn(512)
    for p, q in zip(a.policy.parameters(), b.policy.parameters()):
        np.testing.assert_array_equal(np.asarray(p.detach()), np.asarray(q.detach()))


def test_transition_traces_under_jit():
    """Written with ``rlgrad.numpy``, a transition traces: ``rlgrad.jit`` of a step of 8
    copies gives the eager result on new states, call after call."""
    func = FUNCTIONAL_ENVS["Acrobot-v1"][0]()
    step = rlgrad.jit(lambda s, a: func.observation(func.transition(s, a)))
    rng = np.random.default_rng(0)
    for _ in range(3):
        s, a = rng.uniform(-1, 1, size=(8, 4)), rng.integers(0, 3, size=8)
        np.testing.assert_array_equal(np.asarray(step(s, a)),
                                      func.observation(func.transition(s, a)))


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match="has no functional form; these do: CartPole-v1"):
        make_vec_env("LunarLander-v3", n_envs=2, vectorization_mode="functional")
    venv = make_vec_env("CartPole-v1", n_envs=2, vectorization_mode="functional")
    with pytest.raises(ValueError, match="take no reset options"):
        venv.reset(options={"low": -0.1})
