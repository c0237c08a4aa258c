"""sb3-contrib's ``BatchRenorm1d`` (``rlgrad.rl.contrib.common.torch_layers``) against
sb3-contrib's torch layer in float64: train-mode outputs and gradients (input, scale, bias)
during and after the warm-up (r and d clipped, without a gradient), the buffers after each
step, eval-mode outputs; and CrossQ's actor and critics built from it with sb3-contrib's keys:
its state dict loads strictly and gives its actions and Q-values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad
import rlgrad.rl as rl
from rlgrad.rl.contrib.common.torch_layers import BatchRenorm1d

contrib = pytest.importorskip("sb3_contrib")
th = pytest.importorskip("torch")
from sb3_contrib.common.torch_layers import BatchRenorm1d as TorchBatchRenorm1d  # noqa: E402


def _pair(n: int, warmup: int, **kw):
    theirs = TorchBatchRenorm1d(n, warmup_steps=warmup, **kw).double()
    mine = BatchRenorm1d(n, warmup_steps=warmup, dtype=np.float64, **kw)
    scale, bias = np.linspace(0.5, 2.0, n), np.linspace(-1.0, 1.0, n)
    with th.no_grad():
        theirs.scale.copy_(th.as_tensor(scale))
        theirs.bias.copy_(th.as_tensor(bias))
    mine.scale._value[...], mine.bias._value[...] = scale, bias
    return mine, theirs


@pytest.mark.parametrize("momentum,eps", [(0.01, 0.001), (0.3, 1e-5)])
def test_train_mode_outputs_gradients_and_buffers_are_sb3_contribs(momentum, eps):
    mine, theirs = _pair(4, warmup=3, momentum=momentum, eps=eps)
    rng = np.random.default_rng(0)
    clipped = False
    for step in range(8):  # steps 0..3: warm-up (steps <= 3); then renormalised
        # after the warm-up, batches far from the running averages: r and d hit their clips
        x = rng.normal(size=(7, 4))
        if step > 3:
            x = x * [0.05, 10.0, 1.0, 2.0] + np.array([30.0, -30.0, 0.5, 0.0]) * (-1) ** step
        w = rng.normal(size=(7, 4))
        if step > 3:  # r or d clipped (from the running averages before this step)
            sd = np.sqrt(theirs.ra_var.numpy() + eps)
            r = np.sqrt(x.var(0, ddof=1) + eps) / sd
            clipped |= bool(np.any(np.abs(x.mean(0) - theirs.ra_mean.numpy()) / sd > 5)
                            or np.any((r > 3) | (r < 1 / 3)))
        xt = th.tensor(x, requires_grad=True)
        yt = theirs(xt)
        (yt * th.as_tensor(w)).sum().backward()
        xr = rlgrad.tensor(x, requires_grad=True)
        yr = mine(xr)
        (yr * rlgrad.tensor(w)).sum().backward()
        np.testing.assert_allclose(yr.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
        for name in ("scale", "bias"):
            np.testing.assert_allclose(getattr(mine, name).grad.numpy(),
                                       getattr(theirs, name).grad.numpy(), rtol=1e-10, atol=1e-12)
            getattr(theirs, name).grad = None
            getattr(mine, name).grad = None
        for name in ("ra_mean", "ra_var"):
            np.testing.assert_allclose(getattr(mine, name)._value,
                                       getattr(theirs, name).numpy(), rtol=1e-12, atol=1e-14)
        assert int(mine.steps._value) == int(theirs.steps) == step + 1
    assert clipped  # (the clips were exercised)
    mine.eval()
    theirs.eval()
    x = rng.normal(size=(5, 4))
    np.testing.assert_allclose(mine(x).detach().numpy(), theirs(th.as_tensor(x)).detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    assert int(mine.steps._value) == 8  # eval mode changes nothing
    assert list(mine.state_dict()) == list(theirs.state_dict())


def test_r_and_d_carry_no_gradient_finite_differences():
    """After the warm-up, the gradient is that of the formula with r and d held constant:
    central differences in float64 of the output with r, d frozen at the point."""
    mine, _ = _pair(3, warmup=0)
    mine.steps._value[...] = 1
    mine.ra_mean._value[...] = [0.3, -0.2, 0.1]
    mine.ra_var._value[...] = [0.5, 2.0, 1.0]
    rng = np.random.default_rng(1)
    x0, w = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    ra = (mine.ra_mean._value.copy(), mine.ra_var._value.copy())

    def f(x: np.ndarray, r: np.ndarray, d: np.ndarray) -> float:
        m, v = x.mean(0), x.var(0, ddof=1)
        cm, cv = m - d * np.sqrt(v) / r, v / r**2
        return float((((x - cm) / np.sqrt(cv + mine.eps) * mine.scale._value
                       + mine.bias._value) * w).sum())

    m0, v0 = x0.mean(0), x0.var(0, ddof=1)
    sd = np.sqrt(ra[1] + mine.eps)
    r = np.clip(np.sqrt(v0 + mine.eps) / sd, 1 / 3, 3)
    d = np.clip((m0 - ra[0]) / sd, -5, 5)
    xr = rlgrad.tensor(x0, requires_grad=True)
    (mine(xr) * rlgrad.tensor(w)).sum().backward()
    h, fd = 1e-6, np.zeros_like(x0)
    for idx in np.ndindex(*x0.shape):
        e = np.zeros_like(x0)
        e[idx] = h
        fd[idx] = (f(x0 + e, r, d) - f(x0 - e, r, d)) / (2 * h)
    np.testing.assert_allclose(xr.grad.numpy(), fd, rtol=1e-6, atol=1e-7)


def test_a_one_dimensional_input_is_refused():
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        BatchRenorm1d(3)(np.zeros(3, np.float32))


def _both_crossq(**pk):
    kw = dict(buffer_size=10, seed=0, policy_kwargs=dict(net_arch=[8, 6], **pk))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rl.CrossQ("MlpPolicy", "Pendulum-v1", **kw), \
            contrib.CrossQ("MlpPolicy", "Pendulum-v1", **kw)


def test_crossq_keys_and_strict_load_are_sb3_contribs():
    mine, theirs = _both_crossq(renorm_warmup_steps=2)
    for name in ("actor", "critic", "policy"):
        assert list(getattr(mine, name).state_dict()) == list(getattr(theirs, name).state_dict())
    assert "actor.latent_pi.6.ra_var" in mine.policy.state_dict()
    # sb3-contrib's weights and moved statistics (a few train-mode forwards)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(16, 3)).astype(np.float32)
    acts = rng.uniform(-1, 1, (16, 1)).astype(np.float32)
    theirs.actor.set_bn_training_mode(True)
    theirs.critic.set_bn_training_mode(True)
    for _ in range(4):
        theirs.actor(th.as_tensor(obs))
        theirs.critic(th.as_tensor(obs), th.as_tensor(acts))
    theirs.policy.set_training_mode(False)
    assert int(theirs.actor.latent_pi[0].steps) == 4
    mine.policy.load_state_dict(theirs.policy.state_dict(), strict=True)
    np.testing.assert_allclose(mine.predict(obs, deterministic=True)[0],
                               theirs.predict(obs, deterministic=True)[0], rtol=1e-5, atol=1e-5)
    mine.critic.eval()
    with th.no_grad():
        want = theirs.critic(th.as_tensor(obs), th.as_tensor(acts))
    for q, t in zip(mine.critic(obs, acts), want, strict=True):
        np.testing.assert_allclose(q.detach().numpy(), t.numpy().reshape(-1), rtol=1e-5, atol=1e-5)
    # train mode past the warm-up (steps 4 > 2): the renormalised forward, statistics moved
    mine.critic.train()
    theirs.critic.set_bn_training_mode(True)
    with th.no_grad():
        want = theirs.critic(th.as_tensor(obs), th.as_tensor(acts))
    for q, t in zip(mine.critic(obs, acts), want, strict=True):
        np.testing.assert_allclose(q.detach().numpy(), t.numpy().reshape(-1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mine.critic.qf1[3].ra_var._value,
                               theirs.critic.qf1[3].ra_var.numpy(), rtol=1e-5, atol=1e-6)


def test_crossq_checkpoints_of_the_batchnorm_critics(tmp_path):
    """The older critics' BatchNorm1d keys load into the BatchRenorm1d layers (the same
    statistics); an older actor, which had no normalisation, is refused in one line."""
    m = rl.CrossQ("MlpPolicy", "Pendulum-v1", buffer_size=10, seed=0,
                  policy_kwargs=dict(net_arch=[8]))
    m.critic.qf0[3].ra_var._value[...] = 2.5
    m.critic.qf1[0].scale._value[...] = 0.7
    state = m.get_state()
    names = {"scale": "weight", "ra_mean": "running_mean", "ra_var": "running_var",
             "steps": "num_batches_tracked"}
    state["modules"]["critic"] = {
        ".".join([*k.split(".")[:-1], names.get(k.split(".")[-1], k.split(".")[-1])]): v
        for k, v in state["modules"]["critic"].items()}
    assert "qf0.3.running_var" in state["modules"]["critic"]
    actor = dict(state["modules"]["actor"])
    m2 = rl.CrossQ("MlpPolicy", "Pendulum-v1", buffer_size=10, seed=1,
                   policy_kwargs=dict(net_arch=[8]))
    m2.set_state(state)
    np.testing.assert_array_equal(m2.critic.qf0[3].ra_var._value, 2.5)
    np.testing.assert_array_equal(m2.critic.qf1[0].scale._value, np.float32(0.7))
    state["modules"]["actor"] = {k.replace("latent_pi.1.", "latent_pi.0."): v
                                 for k, v in actor.items() if "latent_pi.0." not in k}
    with pytest.raises(ValueError, match="actor has no Batch Renormalization"):
        m2.set_state(state)


def test_a_dead_relu_unit_after_the_warm_up_gives_torchs_finite_gradient():
    """A feature constant over the batch (a dead ReLU unit): torch's gradient through
    ``sqrt(var)`` is NaN at the layer's input and its ReLU's backward zeroes it; rlgrad's
    ReLU + BatchRenorm1d give torch's gradients, finite."""
    mine, theirs = _pair(3, warmup=0)
    rng = np.random.default_rng(2)
    with th.no_grad():  # past the warm-up, the running mean away from 0
        theirs.steps += 1
    mine.steps._value[...] = 1
    mine.ra_mean._value[...] = 0.4
    with th.no_grad():
        theirs.ra_mean.fill_(0.4)
    x = rng.normal(size=(8, 3))
    x[:, 1] = -np.abs(x[:, 1]) - 0.1  # unit 1 dead
    w = rng.normal(size=(8, 3))
    xt = th.tensor(x, requires_grad=True)
    (theirs(th.relu(xt)) * th.as_tensor(w)).sum().backward()
    xr = rlgrad.tensor(x, requires_grad=True)
    (mine(rlgrad.nn.functional.relu(xr)) * rlgrad.tensor(w)).sum().backward()
    assert np.isfinite(xt.grad.numpy()).all() and (xt.grad.numpy()[:, 1] == 0).all()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mine.scale.grad.numpy(), theirs.scale.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_acting_in_numpy_gives_the_modules_bits(monkeypatch, dtype):
    """Evaluation mode's NumPy step (``forward_numpy``, what ``mlp_numpy`` acts with) gives the
    module's forward bit for bit; in training mode it declines (the forward moves the running
    averages). A trained CrossQ's actions are the same with the plain acting path on and off."""
    mine = BatchRenorm1d(5, warmup_steps=2, dtype=dtype)
    rng = np.random.default_rng(4)
    for _ in range(4):  # running averages away from their start, past the warm-up
        mine(rng.standard_normal((16, 5)).astype(dtype) * 3 + 1)
    x = rng.standard_normal((3, 5)).astype(dtype)
    assert mine.forward_numpy(x) is None  # training mode
    mine.eval()
    with rlgrad.no_grad():
        want = mine(x)._value
    np.testing.assert_array_equal(mine.forward_numpy(x).view(np.uint8), want.view(np.uint8))

    from rlgrad.rl import cnn
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = rl.contrib.CrossQ("MlpPolicy", "Pendulum-v1", seed=0, learning_starts=30)
        model.learn(60)
    obs = rng.standard_normal((4, 3)).astype(np.float32)
    fast = model.predict(obs, deterministic=True)[0]
    monkeypatch.setattr(cnn, "PLAIN_ACTING", False)
    np.testing.assert_array_equal(fast, model.predict(obs, deterministic=True)[0])
