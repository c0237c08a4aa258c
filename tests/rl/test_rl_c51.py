"""C51: its projection against a hand-computed case and CleanRL's floor/ceil scatter, its target
against a NumPy computation, its loss's gradients against finite differences and the closed form,
and that it trains from the API and the CLI as a DQN subclass."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from np_reference import relu_mlp_np

import rlgrad
from rlgrad.gradcheck import check_grads
from rlgrad.rl import ALGORITHMS, C51, DQN, evaluate, load_preset
from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.c51 import categorical_loss, categorical_projection
from rlgrad.rl.steps import grad_step

ROOT = Path(__file__).resolve().parents[2]


def _scatter_projection(tz, p, atoms):
    """CleanRL's c51.py projection, float64: clip, b = (tz - v_min) / dz, the mass split between
    floor(b) and ceil(b) (all of it on b when b is an atom)."""
    dz = atoms[1] - atoms[0]
    b = (np.clip(tz, atoms[0], atoms[-1]) - atoms[0]) / dz
    lo = np.clip(np.floor(b), 0, len(atoms) - 1).astype(int)
    hi = np.clip(np.ceil(b), 0, len(atoms) - 1).astype(int)
    m = np.zeros_like(p)
    for i in range(len(p)):
        np.add.at(m[i], lo[i], (hi[i] + (lo[i] == hi[i]) - b[i]) * p[i])
        np.add.at(m[i], hi[i], (b[i] - lo[i]) * p[i])
    return m


def test_projection_of_a_hand_computed_case():
    atoms = np.arange(5.0)  # dz = 1
    tz = np.array([[0.5, 1.0, 2.25, 5.0, -3.0]])  # between atoms, on one, inside, above, below
    p = np.array([[0.1, 0.2, 0.3, 0.25, 0.15]])
    m = categorical_projection(tz, p, atoms)
    # 0.5 -> half to z0 and z1; 1.0 -> z1; 2.25 -> 3/4 to z2, 1/4 to z3; 5 -> z4; -3 -> z0
    np.testing.assert_allclose(m, [[0.05 + 0.15, 0.05 + 0.2, 0.225, 0.075, 0.25]], atol=1e-15)


def test_projection_equals_cleanrls_scatter_and_keeps_mass_and_mean():
    rng = np.random.default_rng(0)
    atoms = np.linspace(-10, 10, 51)
    p = rng.dirichlet(np.ones(51), size=64)
    tz = rng.normal(0, 8, (64, 51))
    tz[:8] = atoms[rng.integers(0, 51, (8, 51))]  # exactly on atoms (CleanRL's l == u case)
    m = categorical_projection(tz, p, atoms)
    np.testing.assert_allclose(m, _scatter_projection(tz, p, atoms), atol=1e-12)
    np.testing.assert_allclose(m.sum(1), 1.0, atol=1e-12)
    # the mean of a distribution inside the support is kept (the two neighbours' weights)
    inside = np.clip(tz, -10, 10)
    np.testing.assert_allclose(m @ atoms, (p * inside).sum(1), atol=1e-9)


def _model(double_q=False, **kw):
    return C51("CartPole-v1", gamma=0.9, double_q=double_q, seed=0, batch_size=6,
               policy_kwargs={"net_arch": [16], "n_atoms": 7, "v_min": -3.0, "v_max": 3.0}, **kw)


@pytest.mark.parametrize("double_q", [False, True])
def test_c51_target_against_numpy(double_q):
    m = _model(double_q)
    rng = np.random.default_rng(1)
    for p in m.q_net_target.parameters():  # make the target net differ from the online one
        p._value += rng.normal(0, 0.5, p.shape).astype(np.float32)
    n = 6
    b = ReplayBatch(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, n),
                    rng.normal(size=(n, 4)).astype(np.float32),
                    rng.normal(0, 2, n).astype(np.float32), np.array([1, 0, 0, 1, 0, 0], bool),
                    np.zeros(n, bool))

    def probs(net):
        logits = relu_mlp_np(net, b.next_observations).reshape(n, 2, 7)
        e = np.exp(logits - logits.max(2, keepdims=True))
        return e / e.sum(2, keepdims=True)

    atoms = np.linspace(-3, 3, 7)
    p_t = probs(m.q_net_target)
    a_star = ((probs(m.q_net) if double_q else p_t) @ atoms).argmax(1)
    tz = b.rewards[:, None] + 0.9 * (1 - b.terminated[:, None]) * atoms
    y = _scatter_projection(tz, p_t[np.arange(n), a_star], atoms)
    np.testing.assert_allclose(m.td_target(b), y, atol=1e-6)
    np.testing.assert_allclose(m.q_values(b.next_observations), probs(m.q_net) @ atoms,
                               rtol=1e-5, atol=1e-6)


def test_loss_gradients_against_finite_differences_and_the_closed_form():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(5, 3, 4))
    actions = np.array([0, 2, 1, 2, 0])
    target = rng.dirichlet(np.ones(4), size=5)
    check_grads(lambda x: categorical_loss(x, actions, target), order=2)(logits)
    x = rlgrad.tensor(logits, requires_grad=True)
    (g,) = rlgrad.autograd.grad(categorical_loss(x, actions, target), [x])
    p = np.exp(logits) / np.exp(logits).sum(2, keepdims=True)
    expected = np.zeros_like(logits)  # d/dlogits of cross-entropy: (softmax - target) / batch
    expected[np.arange(5), actions] = (p[np.arange(5), actions] - target) / 5
    np.testing.assert_allclose(g._value, expected, rtol=1e-12, atol=1e-15)


def test_training_loss_eager_and_compiled():
    m = _model()
    rng = np.random.default_rng(3)
    obs, actions = rng.normal(size=(6, 4)).astype(np.float32), rng.integers(0, 2, 6)
    target = rng.dirichlet(np.ones(7), size=6).astype(np.float32)
    logits = relu_mlp_np(m.q_net, obs).reshape(6, 2, 7)
    logp = logits - np.log(np.exp(logits).sum(2, keepdims=True))
    exp_loss = -(target * logp[np.arange(6), actions]).sum(1).mean()
    exp_bias = np.zeros((2, 7))  # the output bias of (action, atom)
    for i, a in enumerate(actions):
        exp_bias[a] += (np.exp(logp[i, a]) - target[i]) / 6
    batch = {"obs": obs, "actions": actions, "target": target}
    for compiled in (False, True):
        loss, _, grads = grad_step(m.loss, m._params, compiled)(batch)
        assert float(loss) == pytest.approx(exp_loss, rel=1e-5)
        np.testing.assert_allclose(grads[-1], exp_bias.reshape(-1), rtol=1e-4, atol=1e-6)


def test_c51_is_a_dqn_with_cleanrls_preset():
    assert ALGORITHMS["c51"] is C51 and issubclass(C51, DQN)
    m = C51("CartPole-v1", seed=0)
    assert m.n_atoms == 51 and m.q_net[-1].bias.shape == (102,)
    np.testing.assert_allclose(m.atoms[[0, 25, 50]], [-10, 0, 10])
    assert m.optimizer.param_groups[0]["eps"] == pytest.approx(0.01 / 32)
    preset = load_preset("c51", "CartPole-v1")
    assert preset["policy_kwargs"] == {"net_arch": [120, 84], "n_atoms": 101, "v_min": -100,
                                       "v_max": 100}
    assert preset["n_timesteps"] == 500_000 and preset["train_freq"] == 10


@pytest.mark.parametrize("kw", [{"n_atoms": 1}, {"v_min": 5.0, "v_max": 5.0}, {"n_atoms": 2.5}])
def test_a_bad_support_is_refused_in_one_line(kw):
    with pytest.raises(ValueError, match="n_atoms must be an integer >= 2 and v_min < v_max"):
        C51("CartPole-v1", policy_kwargs=kw)


def test_c51_learns_cartpole_and_loads(tmp_path):
    """A short seeded run (the DQN learning test's schedule): far above the untrained policy."""
    m = C51("CartPole-v1", learning_rate=2.3e-3, batch_size=64, buffer_size=20_000,
            learning_starts=1000, target_update_interval=10, train_freq=256, gradient_steps=128,
            exploration_fraction=0.16, exploration_final_eps=0.04, seed=0,
            policy_kwargs={"net_arch": [64, 64], "n_atoms": 51, "v_min": 0.0, "v_max": 100.0})
    before, _ = evaluate(m, n_episodes=10)
    m.learn(20_000)
    after, _ = evaluate(m, n_episodes=10)
    assert before < 30 and after >= 100  # untrained greedy policy: 9.1; seen after: 188
    m.save(str(tmp_path / "c.safetensors"))
    m2 = C51.load(str(tmp_path / "c.safetensors"))
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(m.q_values(obs), m2.q_values(obs))


def test_c51_from_the_cli(tmp_path):
    run = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "rlgrad.cli", "train", "CartPole-v1", "--algo", "c51",
         "--steps", "600", "--set", "learning_starts=200", "--set", "policy_kwargs.n_atoms=11",
         "--run-dir", str(run), "--no-progress"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    ckpt = rlgrad.load(run / "checkpoint.safetensors")
    assert ckpt["algo"] == "C51"
    assert ckpt["hyperparams"]["policy_kwargs"]["n_atoms"] == 11
