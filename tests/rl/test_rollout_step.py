"""The on-policy rollout step's shared parts against their references: a trunk's features for
acting without the module call (rlgrad.rl.cnn.PLAIN_FEATURES, under PLAIN_ACTING) against the
modules' own forward, bit for bit; the MLP layers' arrays kept while the weights are fixed
against reading them at every call; a fixed-seed PPO run on SB3's SimpleMultiObsEnv with every
acting fast path on against all of them off (the same buffer and trained parameters); the
SB3-VecEnv adapter's steps without a done against the per-copy rule; the finite check of Dict
and Tuple observations; a Dict batch flattened column block by column block
(rlgrad.rl.envs.FLAT_DICT_COLUMNS) against the per-entry path."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from helpers.rl_runs import dict_image_ppo

import rlgrad
from rlgrad.distributions import categorical
from rlgrad.nn import functional as F
from rlgrad.rl import cnn, envs
from rlgrad.rl import policies as P
from rlgrad.rl.cnn import MinAtarCNN, NatureCNN
from rlgrad.rl.finite import NonFiniteError, check_transition
from rlgrad.rl.layers import CombinedExtractor
from rlgrad.rl.policies import trunk_numpy
from rlgrad.rl.vec_env import DummyVecEnv, VecEnvVectorEnv

_IMG = spaces.Box(0, 255, (1, 64, 64), np.uint8)
_SMALL = spaces.Box(0, 255, (2, 10, 10), np.uint8)
_VEC = spaces.Box(-1.0, 1.0, (5,), np.float64)


def _trunks():
    rlgrad.random.seed(0)
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (3, 64 * 64)).astype(np.float32)
    small = rng.integers(0, 256, (3, 2 * 10 * 10)).astype(np.float32)
    vec = rng.standard_normal((3, 5)).astype(np.float32)
    both = CombinedExtractor(spaces.Dict({"img": _IMG, "vec": _VEC}), cnn_output_dim=64)
    two = CombinedExtractor(spaces.Dict({"a": _SMALL, "b": _IMG, "v": _VEC}))
    return [(both, np.concatenate([img, vec], axis=1)),
            (two, np.concatenate([small, img, vec], axis=1)),
            (NatureCNN((1, 64, 64), 32), img.reshape(3, 1, 64, 64).astype(np.uint8)),
            (MinAtarCNN((2, 10, 10), 16), small.reshape(3, 2, 10, 10))]


def test_plain_features_give_the_modules_bits(monkeypatch):
    """``trunk_numpy`` of a Dict extractor (images and a vector) or a CNN takes the registered
    plain path and gives the bits of the module's own forward (PLAIN_ACTING off)."""
    taken = []
    for cls, fn in list(cnn.PLAIN_FEATURES.items()):
        monkeypatch.setitem(cnn.PLAIN_FEATURES, cls,
                            lambda m, x, fn=fn: taken.append(type(m)) or fn(m, x))
    for trunk, x in _trunks():
        taken.clear()
        fast = trunk_numpy(trunk, x)
        assert type(trunk) in taken and isinstance(fast, np.ndarray)
        monkeypatch.setattr(cnn, "PLAIN_ACTING", False)
        taken.clear()
        ref = trunk_numpy(trunk, x)
        monkeypatch.setattr(cnn, "PLAIN_ACTING", True)
        assert not taken and ref.dtype == fast.dtype and (fast != 0).any()
        np.testing.assert_array_equal(fast, ref)


def test_a_hooked_or_subclassed_trunk_is_called_as_a_module():
    """A trunk with a forward hook (nn.hooks moves it to a class of its own) or of a subclass
    that changes its forward is called as a module: the hook runs, the forward is its own."""
    trunk, x = _trunks()[0]
    seen = []
    handle = trunk.register_forward_hook(lambda m, i, o: seen.append(o.shape) or o * 2)
    hooked = trunk_numpy(trunk, x)
    handle.remove()
    assert seen == [(3, trunk.features_dim)]
    np.testing.assert_array_equal(hooked, 2 * trunk_numpy(trunk, x))

    class Doubled(NatureCNN):
        def forward(self, x):
            return super().forward(x) * 2

    net = Doubled((1, 64, 64), 32)
    img = x[:, :64 * 64].reshape(3, 1, 64, 64).astype(np.uint8)
    plain = NatureCNN((1, 64, 64), 32)
    plain.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(trunk_numpy(net, img), 2 * trunk_numpy(plain, img))


def test_plain_features_leave_tensors_and_gradients_to_the_module():
    trunk, x = _trunks()[0]
    assert cnn.plain_features(trunk, rlgrad.as_tensor(x)) is None
    assert cnn.plain_features(trunk, x) is None  # gradients on: the recorded path
    with rlgrad.no_grad():
        assert cnn.plain_features(trunk, x) is not None
        assert cnn.plain_features(rlgrad.nn.Flatten(), x) is None  # (not registered)


@pytest.mark.parametrize("with_callback", [False, True])
def test_a_dict_image_run_gives_the_reference_paths_bits(monkeypatch, with_callback):
    """PPO on SB3's SimpleMultiObsEnv with the acting fast paths on (plain features, conv plans,
    kept weight columns and MLP layers, the C sampling loops) and all of them off: the same
    rollout buffer and trained parameters, bit for bit."""
    fast = dict_image_ppo(96, 32, 192, with_callback)
    monkeypatch.setattr(cnn, "PLAIN_ACTING", False)
    monkeypatch.setattr(F, "CONV_PLANS", False)
    monkeypatch.setattr(F, "KEEP_WEIGHT_COLS", False)
    monkeypatch.setattr(categorical, "C_DRAW", False)
    monkeypatch.setattr(P, "STACKED_TOWERS", False)
    ref = dict_image_ppo(96, 32, 192, with_callback)
    assert np.isfinite(ref[4]).any()  # truncations were bootstrapped (NaN: none)
    for a, b in zip(fast, ref, strict=True):
        np.testing.assert_array_equal(a, b)


def _heads(policy, f):
    return policy._head_np(None, f), policy.values_numpy(None, f)


def test_mlp_layers_are_kept_while_the_weights_are_fixed(monkeypatch):
    """Inside ``weights_fixed()`` (a rollout) the towers', heads' and CNN's arrays are read once
    (kept with the conv weights' columns): the bits of reading them at
    every call; a write in place is seen (the arrays are the parameters' own), an array
    replaced after ``kept.clear()`` (what the rollout does after a callback); KEEP_WEIGHT_COLS
    off keeps nothing."""
    from rlgrad.rl import PPO
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    policy = PPO("MultiInputPolicy", SimpleMultiObsEnv(random_start=False), seed=0).policy
    f = np.random.default_rng(0).standard_normal((3, policy.pi_net[0].in_features)).astype(
        np.float32)
    obs = np.random.default_rng(1).integers(0, 256, (2, 4101)).astype(np.float32)
    ref, ref_f = _heads(policy, f), trunk_numpy(policy._trunk, obs)
    with rlgrad.no_grad(), F.weights_fixed() as kept:
        got = _heads(policy, f)
        assert id(policy.pi_net) in kept and id(policy.vf_net) in kept
        for a, b in zip(got, ref, strict=True):
            assert a.tobytes() == b.tobytes()
        for _ in range(2):  # the CNN's arrays kept at the first call, read at the second
            assert trunk_numpy(policy._trunk, obs).tobytes() == ref_f.tobytes()
        assert id(policy._trunk.extractors["img"]) in kept
        policy.action_net.weight._value *= 2  # in place
        w2 = _heads(policy, f)[0]
        policy.value_net.bias._value = policy.value_net.bias._value + 1  # a new array
        kept.clear()
        v1 = _heads(policy, f)[1]
    assert w2.tobytes() == _heads(policy, f)[0].tobytes() != ref[0].tobytes()
    np.testing.assert_allclose(v1, ref[1] + 1, rtol=1e-6)
    monkeypatch.setattr(F, "KEEP_WEIGHT_COLS", False)
    with F.weights_fixed() as kept:
        assert F.kept_while_fixed() is None
        _heads(policy, f)
        assert not kept


@pytest.mark.parametrize("kwargs", [
    {}, {"net_arch": {"pi": [32, 16], "vf": [32, 16]}, "activation_fn": rlgrad.nn.ReLU},
    {"net_arch": [8]}, {"net_arch": {"pi": [16], "vf": [32]}}])
@pytest.mark.parametrize("continuous", [False, True])
def test_stacked_towers_give_each_towers_bits(monkeypatch, kwargs, continuous):
    """Both towers stacked (one matmul per layer over the pair) against each run apart, bit
    for bit, in batches of 1 and 5, Categorical and Gaussian heads; towers of different shapes,
    STACKED_TOWERS off, or outside a rollout: run apart (None)."""
    from rlgrad.rl import PPO
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    env = SimpleMultiObsEnv(random_start=False, discrete_actions=not continuous)
    policy = PPO("MultiInputPolicy", env, seed=0, policy_kwargs=kwargs).policy
    heads = (policy.action_net, policy.value_net)
    apart = kwargs.get("net_arch") == {"pi": [16], "vf": [32]}
    rng = np.random.default_rng(2)
    for n in (1, 5):
        f = rng.standard_normal((n, policy.pi_net[0].in_features)).astype(np.float32)
        ref = _heads(policy, f)
        with rlgrad.no_grad(), F.weights_fixed() as kept:
            # the first step runs the towers apart (a store emptied at every step, after a
            # callback, never pays for the stacking), the next ones stacked
            assert P.stacked_towers(policy.pi_net, policy.vf_net, heads, f) is None
            both = P.stacked_towers(policy.pi_net, policy.vf_net, heads, f)
            kept.clear()
            assert P.stacked_towers(policy.pi_net, policy.vf_net, heads, f) is None
            monkeypatch.setattr(P, "STACKED_TOWERS", False)
            assert P.stacked_towers(policy.pi_net, policy.vf_net, heads, f) is None
            monkeypatch.setattr(P, "STACKED_TOWERS", True)
        if apart:
            assert both is None
            continue
        assert both is not None
        assert both[0].tobytes() == ref[0].tobytes()
        assert both[1][:, 0].tobytes() == ref[1].tobytes()
    assert P.stacked_towers(policy.pi_net, policy.vf_net, heads, f) is None  # (no rollout)


def test_which_callbacks_may_write_the_weights(tmp_path):
    """rlgrad's own callbacks only read the weights (the rollout keeps what it made of them); a
    user's callback, a user's subclass of one of rlgrad's, or a function may write them, and so
    may any list or event callback that triggers one."""
    from rlgrad.rl.callbacks import (
        BaseCallback,
        CallbackList,
        CheckpointCallback,
        EvalCallback,
        EveryNTimesteps,
        LogEveryNTimesteps,
        StopTrainingOnRewardThreshold,
        make_callback,
    )
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    class Mine(BaseCallback):
        def _on_step(self):
            return True

    class MyCheckpoint(CheckpointCallback):
        pass

    check = CheckpointCallback(10, str(tmp_path))
    ev = EvalCallback(SimpleMultiObsEnv(), StopTrainingOnRewardThreshold(1.0))
    assert not check.may_write_weights() and not ev.may_write_weights()
    assert not CallbackList([check, ev]).may_write_weights()
    assert not EveryNTimesteps(5, check).may_write_weights()
    for writes in (Mine(), MyCheckpoint(10, str(tmp_path)), make_callback(lambda _l, _g: True),
                   CallbackList([check, Mine()]), EveryNTimesteps(5, Mine()),
                   EvalCallback(SimpleMultiObsEnv(), callback_after_eval=Mine()),
                   LogEveryNTimesteps(5)):
        assert writes.may_write_weights()


@pytest.mark.parametrize("writer", [False, True])
def test_callbacks_give_the_reference_bits(monkeypatch, tmp_path, writer):
    """A Dict-image PPO run with rlgrad's own callbacks (the kept arrays last the rollout) or a
    user's callback that writes every weight in place now and then (they are forgotten after
    each of its steps): the rollout buffer and parameters of the run that keeps nothing."""
    from rlgrad.rl import PPO
    from rlgrad.rl.callbacks import BaseCallback, CheckpointCallback, EvalCallback
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    class Shrink(BaseCallback):
        def _on_step(self):
            if self.n_calls % 7 == 0:
                for p in self.model.policy.parameters():
                    p._value *= np.float32(0.99)
            return True

    def run():
        np.random.seed(3)
        model = PPO("MultiInputPolicy", SimpleMultiObsEnv(random_start=False, channel_last=False),
                    n_steps=48, batch_size=24, n_epochs=1, seed=3)
        own = [CheckpointCallback(1000, str(tmp_path)),
               EvalCallback(SimpleMultiObsEnv(random_start=False, channel_last=False),
                            eval_freq=30, n_eval_episodes=1, warn=False)]
        model.learn(96, callback=own + [Shrink()] if writer else own)
        buf = model.rollout_buffer
        return [buf.observations, buf.actions, buf.log_probs, buf.values,
                *(p._value for p in model.policy.parameters())]

    fast = run()
    monkeypatch.setattr(F, "KEEP_WEIGHT_COLS", False)
    for a, b in zip(fast, run(), strict=True):
        np.testing.assert_array_equal(a, b)


class _Count(gym.Env):
    """Counts up; terminates at ``end``, a TimeLimit truncates at ``limit``."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, end):
        self.end, self.t = end, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t == self.end, False, {}


def test_vecenv_adapter_steps_give_the_per_copy_rule():
    """The SB3-VecEnv adapter's terminated / truncated / final observations at every step
    (most with no copy done) against the per-copy infos' definition."""
    from gymnasium.wrappers import TimeLimit

    venv = DummyVecEnv([lambda: TimeLimit(_Count(3), 5), lambda: TimeLimit(_Count(9), 4)])
    adapter = VecEnvVectorEnv(venv)  # (what a VecEnv with wrappers of its own is stepped by)
    adapter.reset(seed=0)
    quiet = 0
    for _ in range(12):
        obs, rew, term, trunc, info = adapter.step(np.zeros(2, np.int64))
        infos = info.per_env
        dones = term | trunc
        want_trunc = [bool(i.get("TimeLimit.truncated", False)) for i in infos]
        assert trunc.tolist() == want_trunc and trunc.dtype == term.dtype == bool
        assert dones.tolist() == ["terminal_observation" in i for i in infos]
        assert rew.tolist() == [1.0, 1.0]
        if dones.any():
            for k in np.flatnonzero(dones):
                assert info["final_obs"][k] is infos[k]["terminal_observation"]
            assert info["_final_obs"].tolist() == dones.tolist()
        else:
            quiet += 1
            assert "final_obs" not in info
    assert quiet >= 5
    assert term.base is None and trunc.base is None  # arrays of their own, every step


def test_finite_check_reads_dict_and_tuple_observations():
    """A NaN / inf in a Dict or Tuple observation's entry stops training in one line naming the
    entry; integer entries (uint8 frames) are finite and pass."""
    img = np.zeros((2, 1, 4, 4), np.uint8)
    ok = {"img": img, "vec": np.ones((2, 3), np.float32)}
    check_transition(ok, np.zeros(2, np.float32), 1)
    check_transition(img, np.zeros(2), 1)
    check_transition((img, np.ones((2, 3))), np.zeros(2), 1)
    bad = {"img": img, "vec": np.array([[1, 2, 3], [1, np.nan, 3]], np.float32)}
    with pytest.raises(NonFiniteError, match=r"environment 1 .* observation entry 'vec' \(nan\)"):
        check_transition(bad, np.zeros(2), 7)
    with pytest.raises(NonFiniteError, match=r"environment 0 .* observation entry 1 \(-inf\)"):
        check_transition((img, np.array([[-np.inf], [0.0]])), np.zeros(2), 7)
    with pytest.raises(NonFiniteError, match=r"environment 1 .* reward \(inf\)"):
        check_transition(ok, np.array([0.0, np.inf]), 7)
    big = {"vec": np.full((2, 3), 3e38, np.float32)}  # the sum overflows: every entry finite
    with np.errstate(over="ignore"):
        check_transition(big, np.zeros(2), 1)
        check_transition({"vec": np.full((2, 3), 1e308)}, np.zeros(2), 1)  # (Python's sum)
        check_transition({"vec": np.full((2, 40), 1e308)}, np.zeros(2), 1)  # (NumPy's)
    wide = np.zeros((2, 40))  # more numbers than are summed in Python: NumPy's reduction
    wide[1, 33] = np.nan
    with pytest.raises(NonFiniteError, match=r"environment 1 .* observation entry 'w' \(nan\)"):
        check_transition({"img": img, "w": wide}, np.zeros(2), 7)


def _dict_cases():
    rng = np.random.default_rng(2)
    goals = spaces.Dict({k: spaces.MultiBinary(10) for k in ("achieved", "desired", "obs")})
    mixed = spaces.Dict({"img": _IMG, "vec": _VEC, "s": spaces.Box(-1, 1, (), np.float32),
                         "m": spaces.Box(-2, 2, (2, 3), np.float64)})
    onehot = spaces.Dict({"v": _VEC, "d": spaces.Discrete(3)})
    frames = spaces.Dict({"v": _VEC, "u": spaces.Box(0, 1, (2, 3, 4), np.uint8)})
    n = 3
    return [
        (goals, {k: rng.integers(0, 2, (n, 10)).astype(np.int8) for k in goals.spaces}, True),
        (mixed, {"img": rng.integers(0, 256, (n, 1, 64, 64)).astype(np.uint8),
                 "vec": rng.standard_normal((n, 5)), "s": rng.standard_normal(n).astype(np.float32),
                 "m": rng.standard_normal((n, 2, 3))}, True),
        (mixed, {"img": np.zeros((1, 1, 64, 64), np.uint8), "vec": np.full((1, 5), 1 / 3),
                 "s": np.zeros(1, np.float32), "m": np.ones((1, 2, 3))}, True),
        (onehot, {"v": rng.standard_normal((n, 5)), "d": np.array([0, 2, 1])}, False),
        (frames, {"v": np.ones((2, 5)), "u": np.ones((2, 2, 3, 4), np.uint8)}, True),
        (goals, {k: [[0] * 10] for k in goals.spaces}, False),  # lists: the per-entry path
    ]


def test_dict_columns_give_the_per_entry_paths_bits(monkeypatch):
    """preprocess_obs of Dict batches (MultiBinary goals; an image, vectors, a scalar and a
    matrix Box; float64 values cast to float32) written column block by column block: the bits
    of the per-entry flattening and concatenate (FLAT_DICT_COLUMNS off); Discrete entries or
    lists take the per-entry path; bad batches its errors."""
    for space, obs, columns in _dict_cases():
        assert (envs._dict_columns(obs, space) is not None) == columns
        monkeypatch.setattr(envs, "FLAT_DICT_COLUMNS", False)
        try:
            ref = envs.preprocess_obs(obs, space)
        except ValueError as e:
            ref = e
        monkeypatch.setattr(envs, "FLAT_DICT_COLUMNS", True)
        if isinstance(ref, ValueError):
            with pytest.raises(ValueError):
                envs.preprocess_obs(obs, space)
            continue
        got = envs.preprocess_obs(obs, space)
        assert got.dtype == ref.dtype == np.float32 and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
    goals, obs, _ = _dict_cases()[0]
    short = dict(obs, obs=obs["obs"][:2])  # rows that do not match: the reference's error
    with pytest.raises(ValueError):
        envs.preprocess_obs(short, goals)
    assert envs._dict_columns(short, goals) is None
    wide = dict(obs, obs=np.zeros((3, 11), np.int8))  # an entry wider than its space
    assert envs._dict_columns(wide, goals) is None

