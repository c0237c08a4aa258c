"""SB3's policy surface on rlgrad.rl: policy_kwargs (activation_fn, net_arch, optimizer_class),
state-dict keys equal to Stable-Baselines3's, features extractors, custom policy classes and the
policy's tensor methods. Installed SB3 and torch are the reference: same inputs, same keys,
shapes and numbers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad
from rlgrad import nn
from rlgrad.rl import A2C, DQN, PPO, SAC, TD3

th = pytest.importorskip("torch")
sb3 = pytest.importorskip("stable_baselines3")


def _sb3(algo: str, env: str, **kw):
    return getattr(sb3, algo)("MlpPolicy", env, device="cpu", **kw)


def _shapes(sd) -> dict[str, tuple[int, ...]]:
    return {k: tuple(np.asarray(v).shape) for k, v in sd.items()}


# ---- activation_fn: torch's classes and rlgrad's, numbers as torch computes them ---------------
ACTIVATIONS = ["ReLU", "Tanh", "LeakyReLU", "ELU", "SiLU", "GELU", "Sigmoid", "Mish", "Softplus"]


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("family", ["torch", "rlgrad"])
def test_every_activation_class_gives_torchs_numbers(name, family):
    act = getattr(th.nn, name) if family == "torch" else getattr(nn, name)
    m = PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(activation_fn=act, net_arch=[8, 8]),
            n_steps=32, batch_size=32, seed=0)
    ref = th.nn.Sequential(th.nn.Linear(4, 8), getattr(th.nn, name)(), th.nn.Linear(8, 8),
                           getattr(th.nn, name)(), th.nn.Linear(8, 2)).double()
    sd = m.policy.state_dict()
    src = ["mlp_extractor.policy_net.0", "mlp_extractor.policy_net.2", "action_net"]
    with th.no_grad():
        for i, key in zip((0, 2, 4), src):
            ref[i].weight.copy_(th.as_tensor(np.asarray(sd[key + ".weight"], dtype=np.float64)))
            ref[i].bias.copy_(th.as_tensor(np.asarray(sd[key + ".bias"], dtype=np.float64)))
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    with rlgrad.no_grad():
        logits = m.policy.distribution(obs).logits._value
    with th.no_grad():
        want = th.log_softmax(ref(th.as_tensor(obs, dtype=th.float64)), dim=1).numpy()
    np.testing.assert_allclose(logits - logits.max(1, keepdims=True),
                               want - want.max(1, keepdims=True), rtol=1e-4, atol=1e-5)
    m.learn(32)  # acting (the NumPy path) and an update run with it


def test_an_unknown_activation_is_one_line():
    with pytest.raises(ValueError, match="activation_fn must be one of ReLU, Tanh") as e:
        PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(activation_fn=th.nn.Hardshrink))
    assert "\n" not in str(e.value)


# ---- state-dict keys and shapes: SB3's ---------------------------------------------------------
@pytest.mark.parametrize("algo,env,kw", [
    ("PPO", "CartPole-v1", {}), ("A2C", "Pendulum-v1", {}),
    ("PPO", "Pendulum-v1", {"policy_kwargs": dict(net_arch=dict(pi=[8], vf=[16, 4]))}),
    ("A2C", "CartPole-v1", {"policy_kwargs": dict(net_arch=[])}),
])
def test_on_policy_state_dict_keys_and_shapes_are_sb3s(algo, env, kw):
    ours = getattr(rlgrad.rl, algo)("MlpPolicy", env, **kw).policy.state_dict()
    theirs = _sb3(algo, env, **kw).policy.state_dict()
    assert _shapes(ours) == _shapes(theirs)


def test_sb3s_key_filter_selects_the_policy_tower():
    sd = PPO("MlpPolicy", "CartPole-v1").policy.state_dict()
    assert sorted(k for k in sd if "policy" in k) == [
        "mlp_extractor.policy_net.0.bias", "mlp_extractor.policy_net.0.weight",
        "mlp_extractor.policy_net.2.bias", "mlp_extractor.policy_net.2.weight"]


# ---- net_arch forms -----------------------------------------------------------------------------
def test_the_pre_1_8_net_arch_form_warns_as_sb3_and_is_used():
    with pytest.warns(UserWarning, match="shared layers in the mlp_extractor are removed"):
        m = A2C("MlpPolicy", "CartPole-v1", policy_kwargs=dict(net_arch=[dict(vf=[8], pi=[4])]))
    ext = m.policy.mlp_extractor
    assert (ext.latent_dim_pi, ext.latent_dim_vf) == (4, 8)


def test_a_dict_net_arch_without_pi_has_no_policy_layers():
    ext = PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(net_arch=dict(vf=[8]))).policy.mlp_extractor
    assert (ext.latent_dim_pi, ext.latent_dim_vf) == (4, 8)
    assert len(ext.policy_net) == 0


# ---- optimizer_class / optimizer_kwargs ---------------------------------------------------------
@pytest.mark.parametrize("algo,env", [(A2C, "Pendulum-v1"), (PPO, "Pendulum-v1"),
                                      (DQN, "CartPole-v1"), (SAC, "Pendulum-v1"),
                                      (TD3, "Pendulum-v1")])
def test_torch_optimizer_classes_map_to_rlgrads(algo, env):
    pk = dict(optimizer_class=th.optim.AdamW, optimizer_kwargs=dict(weight_decay=0.25),
              net_arch=[16])
    m = algo("MlpPolicy", env, policy_kwargs=pk)
    opts = [m.optimizer] if hasattr(m, "optimizer") else [m.actor_optimizer, m.critic_optimizer]
    for opt in opts:
        assert type(opt) is rlgrad.optim.AdamW
        assert opt.param_groups[0]["weight_decay"] == 0.25
        assert opt.param_groups[0]["lr"] == pytest.approx(m.lr_schedule(1.0))


def test_a2c_keeps_its_rmsprop_and_ppo_its_eps_without_optimizer_class():
    a2c, ppo = A2C("MlpPolicy", "CartPole-v1"), PPO("MlpPolicy", "CartPole-v1")
    assert type(a2c.optimizer) is rlgrad.optim.RMSprop
    assert a2c.optimizer.param_groups[0]["eps"] == 1e-5
    assert a2c.optimizer.param_groups[0]["tf_style"] is False  # SB3's: torch's RMSprop
    assert ppo.optimizer.param_groups[0]["eps"] == 1e-5
    assert ppo.policy.optimizer is ppo.optimizer  # SB3's model.policy.optimizer


def test_a_torch_optimizer_without_counterpart_is_one_line():
    with pytest.raises(ValueError, match="torch's Muon has no rlgrad.optim counterpart"):
        PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(optimizer_class=th.optim.Muon))


def test_old_checkpoints_with_pi_net_keys_still_load(tmp_path):
    m = PPO("MlpPolicy", "CartPole-v1", seed=3)
    state = m.get_state()
    pol = state["modules"]["policy"]
    state["modules"]["policy"] = {k.replace("mlp_extractor.policy_net.", "pi_net.")
                                  .replace("mlp_extractor.value_net.", "vf_net."): v
                                  for k, v in pol.items()}
    m2 = PPO("MlpPolicy", "CartPole-v1", seed=4)
    m2.set_state(state)
    for k, v in m.policy.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(m2.policy.state_dict()[k]))


def test_warnings_are_not_raised_for_the_plain_forms():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(net_arch=dict(pi=[8], vf=[8])))


# ---- SAC / TD3: net_arch=dict(pi=, qf=), n_critics in policy_kwargs -----------------------------
@pytest.mark.parametrize("algo", [SAC, TD3])
def test_off_policy_actor_and_critic_take_their_own_layers(algo):
    m = algo("MlpPolicy", "Pendulum-v1",
             policy_kwargs=dict(net_arch=dict(pi=[8, 4], qf=[16]), n_critics=3))
    actor = [p.shape for p in m.actor.parameters() if len(p.shape) == 2]
    critic = [p.shape for p in m.critic.parameters() if len(p.shape) == 2]
    assert actor[:2] == [(8, 3), (4, 8)]
    assert critic == [(16, 4), (1, 16)] * 3  # three critics on [obs, action]
    m.learn(16)


@pytest.mark.parametrize("algo", [SAC, TD3])
def test_a_net_arch_dict_without_qf_is_sb3s_assertion(algo):
    with pytest.raises(AssertionError, match="no key 'qf'") as e:
        algo("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(net_arch=dict(pi=[8])))
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_sac_with_no_hidden_layer_is_linear():
    m = SAC("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(net_arch=[]), learning_starts=4)
    assert len(m.actor.latent_pi) == 0
    m.learn(8)


# ---- off-policy model.policy: SB3's keys; get_parameters / set_parameters ------------------------
@pytest.mark.parametrize("algo,env,kw", [
    ("DQN", "CartPole-v1", {}), ("SAC", "Pendulum-v1", {}), ("TD3", "Pendulum-v1", {}),
    ("DDPG", "Pendulum-v1", {}),
    ("SAC", "Pendulum-v1", {"policy_kwargs": dict(net_arch=dict(pi=[8], qf=[16]), n_critics=3)}),
])
def test_off_policy_policy_keys_and_parameter_names_are_sb3s(algo, env, kw):
    ours = getattr(rlgrad.rl, algo)("MlpPolicy", env, **kw)
    theirs = _sb3(algo, env, **{k: dict(v) if isinstance(v, dict) else v for k, v in kw.items()})
    assert list(ours.policy.state_dict()) == list(theirs.policy.state_dict())
    assert _shapes(ours.policy.state_dict()) == _shapes(theirs.policy.state_dict())
    assert sorted(ours.get_parameters()) == sorted(theirs.get_parameters())


@pytest.mark.parametrize("algo,env", [(PPO, "CartPole-v1"), (SAC, "Pendulum-v1"),
                                      (DQN, "CartPole-v1")])
def test_set_parameters_round_trip_and_sb3s_errors(algo, env):
    import copy

    a, b = algo("MlpPolicy", env, seed=1), algo("MlpPolicy", env, seed=2)
    params = copy.deepcopy(a.get_parameters())
    with pytest.raises(ValueError, match="invalid object name"):
        b.set_parameters({**params, "not_an_object": {}})
    with pytest.raises(ValueError, match="do not match"):
        b.set_parameters({"policy": params["policy"]}, exact_match=True)
    missing = dict(list(params["policy"].items())[:-1])
    with pytest.raises(RuntimeError):  # SB3: torch's strict load_state_dict
        b.set_parameters({**params, "policy": missing}, exact_match=True)
    b.set_parameters({"policy": params["policy"]}, exact_match=False)
    for k, v in a.policy.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(b.policy.state_dict()[k]))
    obs = b.observation_space.sample()
    assert np.array_equal(a.predict(obs, deterministic=True)[0], b.predict(obs, deterministic=True)[0])


def test_set_parameters_from_a_saved_model(tmp_path):
    a, b = PPO("MlpPolicy", "CartPole-v1", seed=1), PPO("MlpPolicy", "CartPole-v1", seed=2)
    a.save(tmp_path / "a")
    b.set_parameters(str(tmp_path / "a"))
    for k, v in a.policy.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(b.policy.state_dict()[k]))
    with pytest.raises(ValueError, match="holds a PPO checkpoint, not A2C"):
        A2C("MlpPolicy", "CartPole-v1").set_parameters(str(tmp_path / "a"))


def test_old_critic_keys_still_load():
    m = TD3("MlpPolicy", "Pendulum-v1", seed=1)
    state = m.get_state()
    for name in ("critic", "critic_target"):
        state["modules"][name] = {k.replace("qf0.", "q_networks.0.").replace("qf1.", "q_networks.1."): v
                                  for k, v in state["modules"][name].items()}
    m2 = TD3("MlpPolicy", "Pendulum-v1", seed=2)
    m2.set_state(state)
    np.testing.assert_array_equal(m.critic.qf1[0].weight._value, m2.critic.qf1[0].weight._value)


def test_sb3s_rmsprop_tf_like_and_a_preset_name_give_the_tensorflow_form():
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

    for cls in (RMSpropTFLike, "RMSpropTFLike", rlgrad.optim.RMSpropTFLike):
        m = A2C("MlpPolicy", "CartPole-v1", policy_kwargs=dict(optimizer_class=cls,
                                                              optimizer_kwargs=dict(eps=1e-5)))
        assert type(m.optimizer) is rlgrad.optim.RMSpropTFLike
        assert m.optimizer.param_groups[0]["tf_style"] is True


def test_a2c_learns_sb3s_continuous_identity_on_sb3s_budget():
    # SB3's tests/test_identity.py::test_continuous[A2C]: 2000 steps, threshold 90 of 100.
    # With TensorFlow's RMSprop (rlgrad's default before) it scored 58 on every seed tried.
    from rlgrad.rl.common.envs import IdentityEnvBox
    from rlgrad.rl.common.evaluation import evaluate_policy

    env = IdentityEnvBox(eps=0.5)
    m = A2C("MlpPolicy", env, learning_rate=1e-3, seed=0, gamma=0.95,
            policy_kwargs=dict(net_arch=[64, 64], log_std_init=-0.5)).learn(2000)
    mean, _ = evaluate_policy(m, env, n_eval_episodes=20, warn=False)
    assert mean >= 90


# ---- custom policies (SB3's "Custom Policy Network") and features extractors ---------------------
class _TwoTowers(nn.Module):
    def __init__(self, feature_dim: int, pi: int = 12, vf: int = 6) -> None:
        super().__init__()
        self.latent_dim_pi, self.latent_dim_vf = pi, vf
        self.policy_net = nn.Sequential(nn.Linear(feature_dim, pi), nn.ELU())
        self.value_net = nn.Sequential(nn.Linear(feature_dim, vf), nn.SiLU())

    def forward(self, features):
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features):
        return self.policy_net(features)

    def forward_critic(self, features):
        return self.value_net(features)


def _custom_policy_class():
    from rlgrad.rl.common.policies import ActorCriticPolicy

    class CustomActorCriticPolicy(ActorCriticPolicy):
        def __init__(self, observation_space, action_space, lr_schedule, *args, **kwargs):
            kwargs["ortho_init"] = False
            super().__init__(observation_space, action_space, lr_schedule, *args, **kwargs)

        def _build_mlp_extractor(self) -> None:
            self.mlp_extractor = _TwoTowers(self.features_dim)

    return CustomActorCriticPolicy


def _linear_extractor():
    from rlgrad.rl.common.torch_layers import BaseFeaturesExtractor

    class Linear8(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim: int = 8):
            super().__init__(observation_space, features_dim)
            self.linear = nn.Sequential(nn.Linear(observation_space.shape[0], features_dim),
                                        nn.ReLU())

        def forward(self, observations):
            return self.linear(observations)

    return Linear8


@pytest.mark.parametrize("algo,env", [(PPO, "CartPole-v1"), (A2C, "Pendulum-v1")])
def test_a_custom_policy_class_acts_as_its_own_forward_computes(algo, env):
    m = algo(_custom_policy_class(), env, n_steps=32, seed=0,
             **({"batch_size": 32} if algo is PPO else {}))
    pol = m.policy
    assert type(pol.mlp_extractor) is _TwoTowers
    obs = np.stack([m.observation_space.sample() for _ in range(5)]).astype(np.float32)
    want = pol.action_net(pol.mlp_extractor.forward_actor(rlgrad.tensor(obs)))._value
    got = pol.mode(obs)  # the NumPy acting path, through the custom extractor
    if algo is PPO:
        np.testing.assert_array_equal(got, want.argmax(1))
    else:
        np.testing.assert_allclose(got.reshape(5, -1), want, rtol=1e-6)
    v = pol.value_net(pol.mlp_extractor.forward_critic(rlgrad.tensor(obs)))._value[:, 0]
    np.testing.assert_allclose(pol.values_numpy(obs), v, rtol=1e-6)
    m.learn(64)


def test_features_extractor_class_and_separate_extractors():
    m = PPO("MlpPolicy", "Pendulum-v1", n_steps=32, batch_size=32,
            policy_kwargs=dict(features_extractor_class=_linear_extractor(),
                               features_extractor_kwargs=dict(features_dim=5),
                               share_features_extractor=False))
    pol = m.policy
    assert pol.features_dim == 5
    assert pol.features_extractor is not pol.vf_features_extractor
    keys = pol.state_dict()
    assert "features_extractor.linear.0.weight" in keys
    assert "vf_features_extractor.linear.0.weight" in keys
    assert keys["mlp_extractor.policy_net.0.weight"].shape == (64, 5)
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    x = rlgrad.tensor(obs)
    want = pol.value_net(pol.mlp_extractor.forward_critic(pol.vf_features_extractor(x)))._value
    np.testing.assert_allclose(pol.values_numpy(obs), want[:, 0], rtol=1e-6)
    m.learn(64)


def test_policy_tensor_methods_agree_with_the_distribution():
    m = PPO("MlpPolicy", "Pendulum-v1", seed=0)
    pol = m.policy
    obs_np = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    obs, vectorized = pol.obs_to_tensor(obs_np)
    assert vectorized and obs.shape == (6, 3)
    assert pol.obs_to_tensor(obs_np[0])[1] is False
    actions = np.random.default_rng(2).normal(size=(6, 1)).astype(np.float32)
    values, log_prob, entropy = pol.evaluate_actions(obs, actions)
    dist = pol.get_distribution(obs)
    np.testing.assert_allclose(log_prob._value, dist.log_prob(actions)._value, rtol=1e-6)
    np.testing.assert_allclose(entropy._value, dist.entropy()._value, rtol=1e-6)
    np.testing.assert_allclose(values._value, pol.predict_values(obs)._value, rtol=1e-6)
    assert values.shape == (6, 1)
    # closed form: a diagonal Gaussian of std exp(log_std) around action_net's mean
    mean = pol.action_net(pol.mlp_extractor.forward_actor(obs))._value
    std = np.exp(pol.log_std._value)
    want = (-0.5 * ((actions - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(1)
    np.testing.assert_allclose(log_prob._value, want, rtol=1e-5)
    acts, vals, lp = pol(obs, deterministic=True)
    np.testing.assert_allclose(acts._value, mean, rtol=1e-6)
    assert vals.shape == (6, 1) and lp.shape == (6,)


def test_set_training_mode_switches_every_module():
    pol = PPO("MlpPolicy", "CartPole-v1").policy
    pol.set_training_mode(False)
    assert not any(mod.training for mod in pol.modules())
    pol.set_training_mode(True)
    assert all(mod.training for mod in pol.modules())
    sac = SAC("MlpPolicy", "Pendulum-v1")
    sac.policy.set_training_mode(False)
    assert not sac.actor.training and not sac.critic.training


def test_policy_save_and_load(tmp_path):
    from rlgrad.rl.common.policies import ActorCriticPolicy

    pol = A2C("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(net_arch=dict(pi=[8], vf=[4]),
                                                            log_std_init=-1.0)).policy
    pol.save(tmp_path / "policy.pkl")
    back = ActorCriticPolicy.load(tmp_path / "policy.pkl")
    for k, v in pol.state_dict().items():
        np.testing.assert_array_equal(v._value, back.state_dict()[k]._value)
    obs = np.zeros(3, dtype=np.float32)
    assert np.array_equal(back.predict(obs, deterministic=True)[0],
                          pol.predict(obs, deterministic=True)[0])


@pytest.mark.parametrize("space_name", ["Text", "Sequence", "Graph"])
def test_an_unsupported_observation_space_is_one_line(space_name):
    from gymnasium import spaces

    from rlgrad.rl.common.policies import ActorCriticPolicy

    space = {"Text": lambda: spaces.Text(5), "Sequence": lambda: spaces.Sequence(spaces.Discrete(2)),
             "Graph": lambda: spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(2))}[space_name]()
    with pytest.raises(ValueError, match=f"{space_name} observation spaces are not supported .* "
                                         "supported: Box") as e:
        ActorCriticPolicy(space, spaces.Discrete(2))
    assert "\n" not in str(e.value)


def test_a_dict_observation_gets_the_combined_extractor():
    from gymnasium import spaces

    from rlgrad.rl.common.policies import MultiInputActorCriticPolicy
    from rlgrad.rl.common.torch_layers import CombinedExtractor

    space = spaces.Dict({"img": spaces.Box(0, 255, (1, 36, 36), np.uint8),
                         "vec": spaces.Box(-1, 1, (3,), np.float32),
                         "d": spaces.Discrete(4)})
    pol = MultiInputActorCriticPolicy(space, spaces.Discrete(2))
    assert isinstance(pol.features_extractor, CombinedExtractor)
    assert pol.features_dim == 256 + 3 + 4
    ours = _shapes(pol.state_dict())
    theirs = _shapes(sb3.common.policies.MultiInputActorCriticPolicy(
        space, spaces.Discrete(2), lambda _: 3e-4).state_dict())
    assert {k: v for k, v in ours.items() if "extractors" not in k} == \
           {k: v for k, v in theirs.items() if "extractors" not in k}
    obs = {k: np.stack([space[k].sample() for _ in range(3)]) for k in space.spaces}
    t, vectorized = pol.obs_to_tensor(obs)
    f = pol.features_extractor(t)._value
    assert vectorized and f.shape == (3, 263)
    assert list(space.spaces) == ["d", "img", "vec"]  # Gymnasium sorts the keys; SB3 follows
    np.testing.assert_array_equal(f[:, :4], np.eye(4)[obs["d"]])  # Discrete: one-hot
    np.testing.assert_allclose(f[:, 260:], obs["vec"], rtol=1e-6)  # the vector, as it is


def test_sac_takes_sb3s_action_noise_on_its_sampled_actions():
    import copy

    from rlgrad.rl.common.noise import NormalActionNoise

    m = SAC("MlpPolicy", "Pendulum-v1", seed=0,
            action_noise=NormalActionNoise(np.zeros(1), 0.3 * np.ones(1)))
    obs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    state = copy.deepcopy(m.rng.bit_generator.state)
    got = m._explore(obs)
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    sample = m.actor.numpy(obs, rng).astype(np.float32)
    noise = (np.float32(0.3) * rng.standard_normal((5, 1))).astype(np.float32)
    np.testing.assert_allclose(got, np.clip(sample + noise, -1.0, 1.0), rtol=1e-6)
    assert not np.allclose(got, sample)


# ---- SB3's three extractor names (pi_/vf_features_extractor) and their state-dict entries -----
def _torch_linear_extractor():
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class Linear8(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim: int = 8):
            super().__init__(observation_space, features_dim)
            self.linear = th.nn.Sequential(th.nn.Linear(observation_space.shape[0], features_dim),
                                           th.nn.ReLU())

        def forward(self, observations):
            return self.linear(observations)

    return Linear8


@pytest.mark.parametrize("shared", [True, False])
def test_extractor_names_and_state_dict_are_sb3s(shared):
    kw = dict(n_steps=32, batch_size=32, seed=0)
    ours = PPO("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(
        features_extractor_class=_linear_extractor(), share_features_extractor=shared), **kw)
    theirs = _sb3("PPO", "Pendulum-v1", policy_kwargs=dict(
        features_extractor_class=_torch_linear_extractor(), share_features_extractor=shared), **kw)
    pol = ours.policy
    assert pol.pi_features_extractor is pol.features_extractor
    assert (pol.vf_features_extractor is pol.features_extractor) == shared
    assert list(pol.state_dict()) == list(theirs.policy.state_dict())  # names and order
    assert _shapes(pol.state_dict()) == _shapes(theirs.policy.state_dict())
    assert len(list(pol.parameters())) == len(list(theirs.policy.parameters()))
    # SB3's state dict (every name listed) loads exactly; an alias's values are the extractor's
    sd = {k: v.numpy() + 1.0 for k, v in theirs.policy.state_dict().items()}
    assert pol.load_state_dict(sd) == ([], [])
    np.testing.assert_array_equal(pol.features_extractor.linear[0].weight.detach().numpy(),
                                  sd["pi_features_extractor.linear.0.weight"])
    with pytest.raises(RuntimeError, match='Missing key.*"pi_features_extractor.linear.0.bias"'):
        pol.load_state_dict({k: v for k, v in sd.items() if not k.startswith("pi_")})
    res = pol.load_state_dict({k: v for k, v in sd.items() if not k.startswith("pi_")},
                              strict=False)
    assert res.missing_keys == ["pi_features_extractor.linear.0.weight",
                                "pi_features_extractor.linear.0.bias"]
    with pytest.raises(RuntimeError, match="Unexpected key.*pi_features_extractor.x"):
        pol.load_state_dict({**sd, "pi_features_extractor.x": sd["log_std"]})


def test_a_model_saved_without_pi_features_extractor_loads_with_sb3s_warning(tmp_path):
    # SB3 < 1.7 had no pi_features_extractor: SB3's load warns, loads the rest and goes on
    from rlgrad.rl.common.envs import FakeImageEnv

    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, discrete=False)
    m = A2C("CnnPolicy", env, n_steps=8, seed=0, policy_kwargs=dict(net_arch=[8]))
    m.learn(16)
    m.save(tmp_path / "new")
    with warnings.catch_warnings():  # the complete model loads without a warning
        warnings.simplefilter("error")
        A2C.load(tmp_path / "new", env=env)
    del m.policy.pi_features_extractor
    assert not any(k.startswith("pi_") for k in m.policy.state_dict())
    m.save(tmp_path / "old")
    with pytest.warns(UserWarning, match="SB3 < 1.7.0"):
        m2 = A2C.load(tmp_path / "old", env=env)
    assert m2.policy.pi_features_extractor is m2.policy.features_extractor
    for k, v in m.policy.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(m2.policy.state_dict()[k]))
    m2.learn(16)
