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
