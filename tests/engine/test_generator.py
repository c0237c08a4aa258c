"""``rlgrad.Generator`` (torch.Generator's methods) accepted by every random function, torch's
``multinomial`` / ``randperm`` / ``bernoulli``, and ``inference_mode``: against torch 2.13
where the behaviour is not a random stream (dtypes, shapes, errors, modes), by reproducibility
and by sample statistics where it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")

DRAWS: dict[str, Callable[[Any, Any], Any]] = {
    "rand": lambda L, g: L.rand(2, 3, generator=g),
    "randn": lambda L, g: L.randn(4, generator=g),
    "randint": lambda L, g: L.randint(0, 10, (5,), generator=g),
    "normal": lambda L, g: L.normal(L.zeros(3), L.ones(3), generator=g),
    "multinomial": lambda L, g: L.multinomial(L.tensor([0.2, 0.3, 0.5]), 6, True, generator=g),
    "randperm": lambda L, g: L.randperm(7, generator=g),
    "bernoulli": lambda L, g: L.bernoulli(L.full((6,), 0.5), generator=g),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_every_draw_takes_a_generator_and_matches_torch_s_dtype_and_shape(name: str) -> None:
    draw = DRAWS[name]
    g = rlgrad.Generator().manual_seed(5)
    a = draw(rlgrad, g)
    g.manual_seed(5)
    rlgrad.manual_seed(123)  # the global stream is not the one drawn from
    b = draw(rlgrad, g)
    np.testing.assert_array_equal(a._value, b._value)
    t = draw(torch, torch.Generator().manual_seed(5))
    assert a.shape == tuple(t.shape) and str(a.dtype) == str(t.dtype).removeprefix("torch.")


def test_generator_state_round_trip_and_seeds() -> None:
    g = rlgrad.Generator(device="cpu")
    assert isinstance(g.initial_seed(), int) and str(g.device) == "cpu"
    assert g.manual_seed(7) is g and g.initial_seed() == 7
    state = g.get_state()
    first = rlgrad.randn(5, generator=g)._value
    assert g.set_state(state) is g
    np.testing.assert_array_equal(rlgrad.randn(5, generator=g)._value, first)
    s = g.seed()
    assert isinstance(s, int) and 0 <= s < 2 ** 63 and g.initial_seed() == s
    assert rlgrad.Generator(s).get_state() == g.get_state()
    with pytest.raises(TypeError, match="what get_state"):
        g.set_state([1, 2])
    with pytest.raises(ValueError, match="non-negative"):
        g.manual_seed(-1)


def test_multinomial_samples_follow_the_weights() -> None:
    g = rlgrad.Generator(0)
    w = rlgrad.tensor([[1.0, 0.0, 3.0], [2.0, 2.0, 0.0]])  # unnormalized, as torch allows
    n = 20000
    s = rlgrad.multinomial(w, n, replacement=True, generator=g)._value
    assert s.shape == (2, n) and s.dtype == np.int64
    for row, p in zip(s, [[0.25, 0.0, 0.75], [0.5, 0.5, 0.0]]):
        freq = np.bincount(row, minlength=3) / n
        np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(0.25 / n))
    once = rlgrad.multinomial(rlgrad.tensor([1.0, 1.0, 1.0, 5.0]), 4, generator=g)._value
    assert sorted(once.tolist()) == [0, 1, 2, 3]  # without replacement: each index once


@pytest.mark.parametrize(("args", "message"), [
    (([0.5, 0.5], 3), "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
    (([0.5, -0.1], 1), "probability tensor contains either `inf`, `nan` or element < 0"),
    (([0.0, 0.0], 1, True), "invalid multinomial distribution (sum of probabilities <= 0)"),
])
def test_multinomial_errors_are_torch_s(args: tuple, message: str) -> None:
    for lib in (torch, rlgrad):
        with pytest.raises(RuntimeError) as e:
            lib.multinomial(lib.tensor(args[0]), *args[1:])
        assert message in str(e.value)


def test_randperm_and_bernoulli() -> None:
    g = rlgrad.Generator(1)
    perm = rlgrad.randperm(50, generator=g)._value
    assert sorted(perm.tolist()) == list(range(50)) and perm.dtype == np.int64
    p = rlgrad.tensor(np.array([0.0, 0.2, 1.0]))
    draws = np.stack([rlgrad.bernoulli(p, generator=g)._value for _ in range(4000)])
    assert draws.dtype == np.float64 and set(np.unique(draws)) <= {0.0, 1.0}
    np.testing.assert_allclose(draws.mean(0), [0.0, 0.2, 1.0], atol=5 * np.sqrt(0.16 / 4000))
    with pytest.raises(RuntimeError, match="p_in <= 1"):  # torch's words
        torch.bernoulli(torch.tensor([1.5]))
    with pytest.raises(RuntimeError, match="all probabilities must be in \\[0, 1\\]"):
        rlgrad.bernoulli(rlgrad.tensor([1.5]))


def _modes(L: Any) -> list:
    seen = []
    x = L.tensor([1.0], requires_grad=True)
    with L.inference_mode():
        seen += [L.is_inference_mode_enabled(), L.is_grad_enabled(), (x * 2).requires_grad]
        with L.inference_mode(False):
            seen += [L.is_inference_mode_enabled()]
    seen += [L.is_inference_mode_enabled(), L.is_grad_enabled()]

    @L.inference_mode()
    def called() -> list:
        return [L.is_inference_mode_enabled(), (x * 2).requires_grad]

    @L.inference_mode
    def bare() -> bool:
        return L.is_grad_enabled()

    return seen + called() + [bare(), L.is_inference_mode_enabled()]


def test_inference_mode_is_torch_s() -> None:
    assert _modes(rlgrad) == _modes(torch)


def test_uniform_and_normal_methods_take_a_generator() -> None:
    g = rlgrad.Generator(3)
    a = rlgrad.zeros(5).uniform_(-2.0, 2.0, generator=g)._value.copy()
    b = rlgrad.zeros(3).normal_(1.0, 0.5, generator=g)._value.copy()
    g.manual_seed(3)
    np.testing.assert_array_equal(rlgrad.zeros(5).uniform_(-2.0, 2.0, generator=g)._value, a)
    np.testing.assert_array_equal(rlgrad.zeros(3).normal_(1.0, 0.5, generator=g)._value, b)
    assert np.all((a >= -2.0) & (a < 2.0)) and a.dtype == np.float32
    t = torch.zeros(5).uniform_(-2.0, 2.0, generator=torch.Generator().manual_seed(3))
    assert str(t.dtype) == "torch.float32"
