"""SB3's save/load idioms on rlgrad.rl: state dicts built with torch (``th.rand_like`` of ours),
spaces that keep their generator's ``SeedSequence`` through two save/load rounds,
``load(device="cuda")`` on a CPU-only library, ``model.policy = th.compile(model.policy)``,
hyperparameters changed on the model before ``save``, and the replay buffer's file."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import rlgrad
from rlgrad.rl import DQN, PPO, SAC
from rlgrad.rl.common.envs import IdentityEnv, IdentityEnvBox
from rlgrad.rl.common.vec_env import DummyVecEnv

torch = pytest.importorskip("torch")


def test_load_state_dict_takes_torch_tensors() -> None:
    """The values of a torch state dict land in the parameters exactly (float32 both)."""
    net = rlgrad.nn.Sequential(rlgrad.nn.Linear(3, 4), rlgrad.nn.Tanh(), rlgrad.nn.Linear(4, 2))
    g = torch.Generator().manual_seed(0)
    new = {k: torch.rand(tuple(v.shape), generator=g) for k, v in net.state_dict().items()}
    new["0.weight"].requires_grad_(True)  # a leaf needing grad is read through detach()
    net.load_state_dict(new)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), new[k].detach().numpy())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    tnet.load_state_dict({k: v.detach() for k, v in new.items()})
    np.testing.assert_allclose(net(rlgrad.tensor(x)).detach().numpy(),
                               tnet(torch.from_numpy(x)).detach().numpy(), rtol=1e-6)


def test_shape_mismatch_of_a_torch_tensor_is_one_error() -> None:
    net = rlgrad.nn.Linear(3, 4)
    with pytest.raises(RuntimeError, match=r"size mismatch for weight.*\(4, 2\)"):
        net.load_state_dict({"weight": torch.zeros(4, 2), "bias": torch.zeros(4)})


def test_spaces_survive_two_save_load_rounds(tmp_path: Path) -> None:
    """A space's generator pickles a SeedSequence: once read back as an unknown name, the second
    save wrote that placeholder and the third load lost the spaces."""
    env = DummyVecEnv([lambda: IdentityEnvBox(-10, 10)])
    m = PPO("MlpPolicy", env, n_steps=64, batch_size=64, seed=0)
    m.observation_space.seed(5)
    m.save(tmp_path / "a")
    m2 = PPO.load(tmp_path / "a.zip")
    m2.save(tmp_path / "b")
    m3 = PPO.load(tmp_path / "b.zip")
    assert m3.observation_space == m.observation_space
    assert m3.action_space == m.action_space
    m.observation_space.seed(5)
    m3.observation_space.seed(5)
    np.testing.assert_array_equal(m3.observation_space.sample(), m.observation_space.sample())


def test_load_on_cuda_gives_the_cpu_as_sb3_without_a_gpu(tmp_path: Path) -> None:
    m = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, seed=0)
    assert isinstance(m.device, rlgrad.device) and m.device.type == "cpu"
    m.save(tmp_path / "m")
    obs = np.zeros((3, 4), np.float32)
    want = m.predict(obs, deterministic=True)[0]
    for dev in ("auto", "cpu", "cuda", "cuda:0", torch.device("cuda")):
        loaded = PPO.load(tmp_path / "m.zip", device=dev)
        assert loaded.device.type == "cpu" and loaded.policy.device.type == "cpu"
        np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], want)
    with pytest.raises(ValueError, match="device='mps' is out of range"):
        PPO.load(tmp_path / "m.zip", device="mps")


def test_torch_compile_of_the_policy_keeps_the_policy(tmp_path: Path) -> None:
    """torch cannot compile NumPy code: the policy it wraps is kept (with a warning), so the
    model saves, loads and predicts as before."""
    m = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, seed=0)
    policy = m.policy
    with pytest.warns(UserWarning, match="torch.compile cannot compile rlgrad's policy"):
        m.policy = torch.compile(m.policy)
    assert m.policy is policy and m.__dict__["policy"] is policy
    m.save(tmp_path / "m")
    obs = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(PPO.load(tmp_path / "m.zip").predict(obs, deterministic=True)[0],
                                  m.predict(obs, deterministic=True)[0])
    s = SAC("MlpPolicy", "Pendulum-v1", seed=0)
    with pytest.warns(UserWarning, match="torch.compile"):
        s.policy = torch.compile(s.policy)
    with pytest.raises(AttributeError, match="SAC.policy is a view"):
        s.policy = policy


def test_off_policy_policy_call_gives_the_networks_actions() -> None:
    """SB3's ``policy(obs)``: SAC's actions in [-1, 1] (predict's after unscale_action), DQN's
    greedy actions (predict's)."""
    s = SAC("MlpPolicy", "Pendulum-v1", seed=0)
    obs = np.stack([s.observation_space.sample() for _ in range(5)])
    a = s.policy(obs, deterministic=True).numpy()
    assert a.shape == (5, 1) and np.all(np.abs(a) <= 1)
    np.testing.assert_allclose(s.policy.unscale_action(a), s.predict(obs, deterministic=True)[0],
                               rtol=1e-6)
    d = DQN("MlpPolicy", DummyVecEnv([lambda: IdentityEnv(10)]), seed=0)
    obs = np.arange(10).reshape(10)
    q = d.q_net(rlgrad.nn.functional.one_hot(rlgrad.tensor(obs), 10).float()).detach().numpy()
    np.testing.assert_array_equal(d.policy(obs, deterministic=True).numpy(), q.argmax(1))


def test_changed_attributes_are_saved(tmp_path: Path) -> None:
    """``model.verbose = 2`` then ``save``: SB3 saves the model's attributes, so does rlgrad;
    ``exclude`` leaves one out, ``include`` keeps it."""
    m = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, seed=0, gamma=0.95)
    m.verbose, m.gamma = 2, 0.9
    m.save(tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ("Using cpu device" only)
        loaded = PPO.load(tmp_path / "m.zip")
    assert loaded.verbose == 2 and loaded.gamma == 0.9
    m.save(tmp_path / "m", exclude=["verbose"])
    assert PPO.load(tmp_path / "m.zip").verbose == 0
    m.save(tmp_path / "m", exclude=["verbose"], include=["verbose"])
    assert PPO.load(tmp_path / "m.zip").verbose == 2


def test_optimize_memory_usage_is_the_buffers_option() -> None:
    """SB3's constructor argument: given to the buffer, whose check applies (it cannot go with
    handle_timeout_termination); training runs the same way."""
    m = SAC("MlpPolicy", IdentityEnvBox(-10, 10), buffer_size=100, learning_starts=10, seed=0,
            optimize_memory_usage=True, replay_buffer_kwargs={"handle_timeout_termination": False},
            policy_kwargs=dict(net_arch=[8]))
    assert m.optimize_memory_usage and m.replay_buffer_kwargs["optimize_memory_usage"]
    m.learn(40)
    assert m.num_timesteps == 40 and m.replay_buffer.size() == 40
    with pytest.raises(ValueError, match="optimize_memory_usage = True and "
                       "handle_timeout_termination = True"):
        SAC("MlpPolicy", "Pendulum-v1", optimize_memory_usage=True)


def test_replay_buffer_round_trips_through_names_and_open_files(tmp_path: Path) -> None:
    m = DQN("MlpPolicy", IdentityEnv(10), buffer_size=200, learning_starts=30, seed=0,
            policy_kwargs=dict(net_arch=[8]))
    m.learn(60)
    want = {k: np.array(v) for k, v in m.replay_buffer.state_dict().items()
            if isinstance(v, np.ndarray)}
    m.save_replay_buffer(tmp_path / "rb")
    m.replay_buffer = None  # (SB3's test: a buffer set to None is rebuilt by load)
    m.load_replay_buffer(tmp_path / "rb")
    with open(tmp_path / "rb2", "w+b") as fp:
        m.save_replay_buffer(fp)
        fp.seek(0)
        m.replay_buffer = None
        m.load_replay_buffer(fp)
        assert not fp.closed
    got = m.replay_buffer.state_dict()
    assert m.replay_buffer.size() == 60
    for k, v in want.items():
        np.testing.assert_array_equal(np.asarray(got[k]), v)


@pytest.mark.parametrize("algo", ["DQN", "DDPG"])
def test_off_policy_policy_save_and_load(tmp_path: Path, algo: str) -> None:
    """SB3's ``policy.save(p)`` / ``type(policy).load(p)``: the same greedy actions."""
    import rlgrad.rl as rl

    env = IdentityEnv(10) if algo == "DQN" else IdentityEnvBox(-10, 10)
    m = getattr(rl, algo)("MlpPolicy", env, learning_starts=10, seed=0,
                          policy_kwargs=dict(net_arch=[16]))
    m.learn(40)
    obs = np.stack([m.observation_space.sample() for _ in range(6)])
    want = m.policy.predict(obs, deterministic=True)[0]
    m.policy.save(tmp_path / "policy.pkl")
    policy = type(m.policy).load(tmp_path / "policy.pkl")
    np.testing.assert_array_equal(policy.predict(obs, deterministic=True)[0], want)
    for k, v in m.policy.state_dict().items():
        np.testing.assert_array_equal(policy.state_dict()[k].numpy(), v.numpy())


def test_sac_fixed_ent_coef_is_a_tensor_and_no_log(tmp_path: Path) -> None:
    m = SAC("MlpPolicy", "Pendulum-v1", seed=0, ent_coef=0.01, learning_starts=10,
            policy_kwargs=dict(net_arch=[8]))
    assert m.log_ent_coef is None
    t = m.ent_coef_tensor
    assert t.shape == () and t.dtype == np.float32 and float(t) == np.float32(0.01)
    m.learn(20)
    m.save(tmp_path / "sac")
    loaded = SAC.load(tmp_path / "sac", env=m.get_env())
    assert loaded.log_ent_coef is None and float(loaded.ent_coef_tensor) == np.float32(0.01)
    learned = SAC("MlpPolicy", "Pendulum-v1", seed=0, ent_coef="auto_0.5")
    assert float(learned.log_ent_coef.exp()[0]) == pytest.approx(0.5)
    with pytest.raises(AttributeError, match="learns its entropy coefficient"):
        _ = learned.ent_coef_tensor


def test_load_wraps_channels_last_images_as_the_constructor(tmp_path: Path) -> None:
    """A model built on channels-last images sees them transposed (SB3's VecTransposeImage);
    ``load(path, env=the same env)`` wraps it the same way instead of refusing its space."""
    from rlgrad.rl import A2C
    from rlgrad.rl.common.envs import FakeImageEnv

    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=2, discrete=False)
    m = A2C("CnnPolicy", env, n_steps=4, seed=0, policy_kwargs=dict(net_arch=[8]))
    assert m.observation_space.shape == (2, 36, 36)
    m.save(tmp_path / "a2c")
    loaded = A2C.load(tmp_path / "a2c.zip", env=env)
    obs = np.stack([env.observation_space.sample() for _ in range(3)])  # channels last
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0],
                                  m.predict(obs, deterministic=True)[0])
    loaded.learn(8)


def test_policy_is_vectorized_observation_transposes_images() -> None:
    """A channels-last image is one observation of a channels-first space (SB3's policy
    transposes it first); a batch of them is a batch; a wrong shape is one ValueError."""
    from gymnasium import spaces

    policy = DQN("MlpPolicy", "CartPole-v1").policy
    policy.observation_space = spaces.Box(0, 255, (3, 32, 32), np.uint8)
    assert not policy.is_vectorized_observation(np.zeros((32, 32, 3), np.uint8))
    assert not policy.is_vectorized_observation(np.zeros((3, 32, 32), np.uint8))
    assert policy.is_vectorized_observation(np.zeros((5, 32, 32, 3), np.uint8))
    assert policy.is_vectorized_observation(np.zeros((5, 3, 32, 32), np.uint8))
    with pytest.raises(ValueError, match=r"Unexpected observation shape \(31, 32, 3\)"):
        policy.is_vectorized_observation(np.zeros((31, 32, 3), np.uint8))
