"""PPO's value clipping (``rlgrad.rl.ppo.clipped_values``): SB3's clipped term, and with
``clip_vf_max=True`` PureJaxRL's and CleanRL's larger of the clipped and unclipped squared errors;
values and gradients (1st and 2nd order) against PyTorch and finite differences, and the option
reaching the eager and compiled updates alike."""

from __future__ import annotations

import numpy as np
import pytest

from rlgrad import grad
from rlgrad.native import build
from rlgrad.rl import PPO
from rlgrad.rl.compiled_loop import use_key_streams
from rlgrad.rl.ppo import clipped_values

torch = pytest.importorskip("torch")

C = 0.2


@pytest.fixture(autouse=True)
def _native_strict(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A compiled loop whose C disagrees with its trace raises instead of falling back."""
    monkeypatch.setenv("RLGRAD_NATIVE_STRICT", "1")
    monkeypatch.setenv("RLGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))


def _rows(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values, old values and returns in float64, the values 0.01 or more from a clip bound
    (where the loss has a kink) so that central differences straddle none."""
    rng = np.random.default_rng(seed)
    old = rng.normal(size=200)
    move = rng.uniform(-0.6, 0.6, size=200)
    move = np.where(np.abs(np.abs(move) - C) < 0.01, move * 1.2, move)
    return old + move, old, old + rng.normal(scale=0.5, size=200)


def _loss(pessimistic: bool, old: np.ndarray, ret: np.ndarray):  # noqa: ANN202
    return lambda v: ((ret - clipped_values(v, old, ret, C, pessimistic)) ** 2).sum()


def _torch_loss(pessimistic: bool, v, old: np.ndarray, ret: np.ndarray):  # noqa: ANN001, ANN202
    o, r = torch.tensor(old), torch.tensor(ret)
    clipped = (r - (o + torch.clamp(v - o, -C, C))) ** 2  # SB3's form
    return (torch.maximum((r - v) ** 2, clipped) if pessimistic else clipped).sum()


@pytest.mark.parametrize("pessimistic", [False, True], ids=["sb3", "max"])
def test_value_loss_and_its_gradients_equal_pytorchs(pessimistic: bool) -> None:
    v, old, ret = _rows(0)
    f = _loss(pessimistic, old, ret)
    tv = torch.tensor(v, requires_grad=True)
    tl = _torch_loss(pessimistic, tv, old, ret)
    (tg,) = torch.autograd.grad(tl, tv, create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), tv)  # separable: the Hessian's diagonal
    np.testing.assert_allclose(float(f(v)), tl.item(), rtol=1e-12)
    g = np.asarray(grad(f)(v))
    np.testing.assert_allclose(g, tg.detach().numpy(), rtol=1e-10, atol=1e-12)
    h = np.asarray(grad(lambda x: grad(f)(x).sum())(v))
    np.testing.assert_allclose(h, th.numpy(), atol=1e-12)
    if pessimistic:  # the closed form: max of the two squared errors
        sb3 = (ret - (old + np.clip(v - old, -C, C))) ** 2
        np.testing.assert_allclose(float(f(v)), np.maximum((ret - v) ** 2, sb3).sum(), rtol=1e-12)
        # rows whose value left the clip range toward its return: no gradient in SB3's form,
        # the clipped error is the larger one here too
        assert (h == 0).any() and (h == 2).any()


@pytest.mark.parametrize("pessimistic", [False, True], ids=["sb3", "max"])
def test_value_loss_gradient_equals_finite_differences(pessimistic: bool) -> None:
    v, old, ret = _rows(1)
    f = _loss(pessimistic, old, ret)
    g = np.asarray(grad(f)(v))
    eps = 1e-6
    for i in range(0, 200, 7):
        e = np.zeros_like(v)
        e[i] = eps
        fd = (float(f(v + e)) - float(f(v - e))) / (2 * eps)
        assert abs(fd - g[i]) < 1e-6 * max(1.0, abs(g[i]))


# a step size at which some values overshoot their returns within 4 updates (where the two
# forms differ: at 1e-3 and 2 epochs none does yet)
KW = dict(n_envs=4, n_steps=64, batch_size=64, n_epochs=4, clip_range_vf=0.2, vf_coef=0.25,
          learning_rate=3e-3)


def test_clip_vf_max_changes_the_update_eager_and_compiled_alike() -> None:
    """The option reaches the eager loss and the compiled loop's (equal parameters after 4
    updates), and changes what they learn (against SB3's clip)."""
    compiled = PPO("CartPole-v1", seed=2, compile_loop=True, clip_vf_max=True, **KW)
    compiled.learn(1024)
    eager = use_key_streams(PPO("CartPole-v1", seed=2, vectorization_mode="functional",
                                clip_vf_max=True, **KW))
    eager.learn(1024)
    sb3 = use_key_streams(PPO("CartPole-v1", seed=2, vectorization_mode="functional", **KW))
    sb3.learn(1024)

    def diff(a: PPO, b: PPO) -> float:
        return max(float(np.abs(np.asarray(x._value) - np.asarray(y._value)).max())
                   for x, y in zip(a.policy.parameters(), b.policy.parameters()))

    assert compiled.loop_backend == ("native" if build.compiler() is not None else "numpy")
    assert diff(compiled, eager) <= 1e-6
    assert diff(eager, sb3) > 1e-3


def test_clip_vf_max_without_a_clip_range_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="needs clip_range_vf") as e:
        PPO("CartPole-v1", clip_vf_max=True)
    assert "\n" not in str(e.value)
