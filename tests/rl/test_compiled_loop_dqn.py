"""DQN's compiled loop (rlgrad.rl.compiled_loop.dqn): equal to eager DQN on FunctionalVectorEnv
with the same key streams, N seeds in one program equal to N programs, learning, refusals."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rlgrad.native import LOWERINGS, build
from rlgrad.native.lowerings import _elementwise
from rlgrad.rl import C51, DQN, QRDQN, evaluate
from rlgrad.rl.compiled_loop import clear_programs, train_seeds, use_key_streams
from rlgrad.rl.compiled_loop.dqn import dqn_schedule

# Parameters after a few hundred Adam steps: compiled vs eager. Only summation orders differ
# (batched matmuls, the Huber loss's sum, the targets' chunks), so the float32 parameters agree
# to a few ulps of their size; the updates move them by more than 1000 times that.
ATOL = 1e-6


def _max_diff(a: list, b: list) -> float:
    return max(float(np.abs(np.asarray(x._value) - np.asarray(y._value)).max())
               for x, y in zip(a, b))


SMALL = dict(learning_starts=100, batch_size=16, policy_kwargs=dict(net_arch=[32, 32]),
             learning_rate=1e-3)
CASES = [  # ring shorter than the run (it wraps), 2 copies, hard target copies
    (DQN, "CartPole-v1", 1000, dict(n_envs=2, train_freq=8, gradient_steps=4, buffer_size=300,
                               target_update_interval=50, **SMALL)),
    # soft target updates, Double DQN, gradient_steps=-1, a linear learning rate
    (DQN, "CartPole-v1", 800, dict(n_envs=4, train_freq=4, gradient_steps=-1, buffer_size=2000,
                              tau=0.3, target_update_interval=8, double_q=True,
                              **{**SMALL, "learning_rate": "lin_1e-3"})),
    # one copy, time limits (200 steps) ending the bootstrap, exploration over absolute steps
    (DQN, "MountainCar-v0", 700, dict(n_envs=1, train_freq=4, gradient_steps=2, buffer_size=1000,
                                 target_update_interval=30, exploration_steps=400,
                                 replay_buffer_kwargs=dict(handle_timeout_termination=False),
                                 **SMALL)),
    # time limits bootstrapped (the default), the RMSprop optimizer, gradient clipping tight
    (DQN, "Acrobot-v1", 600, dict(n_envs=3, train_freq=2, gradient_steps=1, buffer_size=1000,
                             max_grad_norm=0.5, target_update_interval=20,
                             policy_kwargs=dict(net_arch=[16], optimizer_class="RMSprop"),
                             **{k: v for k, v in SMALL.items() if k != "policy_kwargs"})),
    # the variants, through their hooks (q_of, bootstrap_target, loss_of)
    (QRDQN, "CartPole-v1", 800, dict(n_envs=2, train_freq=8, gradient_steps=4, buffer_size=500,
                                     target_update_interval=40,
                                     **{**SMALL, "policy_kwargs": dict(net_arch=[32],
                                                                       n_quantiles=7)})),
    (C51, "CartPole-v1", 800, dict(n_envs=2, train_freq=8, gradient_steps=4, buffer_size=500,
                                   target_update_interval=40, double_q=True,
                                   **{**SMALL, "policy_kwargs": dict(net_arch=[32], n_atoms=11,
                                                                     v_min=0.0, v_max=50.0)})),
]


@pytest.mark.parametrize("algo, env_id, steps, kw", CASES,
                         ids=[f"{c[0].__name__}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_compiled_loop_equals_eager_dqn(algo: type, env_id: str, steps: int, kw: dict) -> None:
    compiled = algo(env_id, seed=3, compile_loop=True, **kw)
    start = [np.array(p._value) for p in compiled._params]
    compiled.learn(steps)
    eager = use_key_streams(algo(env_id, seed=3, vectorization_mode="functional", **kw))
    eager.learn(steps)
    assert compiled.num_timesteps == eager.num_timesteps
    assert compiled._n_updates == eager._n_updates > 0
    assert compiled.exploration_rate == eager.exploration_rate
    moved = max(float(np.abs(p._value - s).max()) for p, s in zip(eager._params, start))
    assert moved > 1000 * ATOL
    assert _max_diff(compiled._params, eager._params) <= ATOL
    assert _max_diff(compiled._target_params, eager._target_params) <= ATOL
    rb, ring = eager.replay_buffer, compiled._loop_state["buf"]
    n = rb.size()
    assert (ring["pos"][0], ring["size"][0]) == (rb.pos, n)
    np.testing.assert_array_equal(ring["obs"][0, :n], rb.observations[:n])
    np.testing.assert_array_equal(ring["next_obs"][0, :n], rb.next_observations[:n])
    np.testing.assert_array_equal(ring["actions"][0, :n], rb.actions[:n])
    np.testing.assert_array_equal(ring["rewards"][0, :n], rb.rewards[:n])
    stored = rb.terminated | rb.truncated if eager._truncation_terminates else rb.terminated
    np.testing.assert_array_equal(ring["terminated"][0, :n], stored[:n])


def test_a_second_learn_goes_on_as_the_eager_run_does() -> None:
    kw = CASES[0][3]
    compiled = DQN("CartPole-v1", seed=1, compile_loop=True, **kw)
    eager = use_key_streams(DQN("CartPole-v1", seed=1, vectorization_mode="functional", **kw))
    for m in (compiled, eager):
        m.learn(400)
        m.learn(400, reset_num_timesteps=False)
    assert compiled.num_timesteps == eager.num_timesteps == 800
    assert _max_diff(compiled._params, eager._params) <= ATOL


def test_the_schedule_is_the_eager_loops() -> None:
    """Epsilon per step, warm-up, target syncs and training per iteration, as eager reads them."""
    m = DQN("CartPole-v1", seed=0, compile_loop=True, n_envs=2, train_freq=3, learning_starts=7,
            target_update_interval=4, exploration_fraction=0.5, exploration_final_eps=0.1)
    m._total_timesteps = 24
    s = dqn_schedule(m, 24)
    assert s["eps"].shape == (4, 3)  # 24 steps / (3 steps x 2 copies)
    # num_timesteps before each step: 0, 2, 4, ...; warm below 7; train after 6, 12, 18, 24
    np.testing.assert_array_equal(s["warm"].ravel(), np.arange(0, 24, 2) < 7)
    np.testing.assert_array_equal(s["train"], [False, True, True, True])
    np.testing.assert_array_equal(s["syncs"], [1, 2, 1, 2])  # every 2 calls: calls 2, 4, ...
    # epsilon: 1 at the first step, then linear over half the run (12 steps) down to 0.1
    after = np.arange(2, 25, 2)[:-1]
    expect = np.concatenate([[1.0], 1.0 - 0.9 * np.minimum(after / 12, 1.0)])
    np.testing.assert_allclose(s["eps"].ravel(), expect, rtol=0, atol=1e-12)


def test_seeds_in_one_program_equal_one_program_per_seed() -> None:
    kw = CASES[0][3]
    together = train_seeds(DQN, "CartPole-v1", [0, 4], 600, **kw)
    for m in together:
        alone = DQN("CartPole-v1", seed=m.seed, compile_loop=True, **kw)
        alone.learn(600)
        assert _max_diff(m._params, alone._params) <= ATOL
        np.testing.assert_array_equal(m.loop_returns[1], alone.loop_returns[1])
    assert _max_diff(together[0]._params, together[1]._params) > 1e-3  # the seeds differ


def test_compiled_dqn_learns_cartpole() -> None:
    """A short run of the CartPole preset's numbers (smaller network, 15k steps): the greedy
    policy's return is well above an untrained one's (about 9: it falls at once)."""
    kw = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
              target_update_interval=10, train_freq=256, gradient_steps=128,
              exploration_fraction=0.16, exploration_final_eps=0.04,
              policy_kwargs=dict(net_arch=[64, 64]))
    model = DQN("CartPole-v1", seed=0, compile_loop=True, **kw)
    untrained, _ = evaluate(model, "CartPole-v1", n_episodes=5, seed=100)
    model.learn(15_000)
    trained, _ = evaluate(model, "CartPole-v1", n_episodes=5, seed=100)
    assert untrained < 30
    assert trained > 75  # 112-138 across float-rounding changes of the engine; untrained ~9


def test_refusals_are_one_line() -> None:
    with pytest.raises(ValueError, match=r"^DQN\(compile_loop=True\) needs a functional "
                                         r"environment, got \w*VectorEnv: pass one of the ids"):
        DQN("CartPole-v1", compile_loop=True, vectorization_mode="sync")
    with pytest.raises(ValueError, match="train_freq in steps"):
        DQN("CartPole-v1", compile_loop=True, train_freq=(1, "episode"))

    class OwnLoss(DQN):  # a loss the compiled loop cannot see (no loss_of beside it)
        def loss(self, batch: dict) -> tuple:
            return super().loss(batch)

    with pytest.raises(ValueError, match="override them with q_values and loss"):
        OwnLoss("CartPole-v1", compile_loop=True)
    m = DQN("CartPole-v1", compile_loop=True, learning_starts=10)
    with pytest.raises(ValueError, match="calls no callback"):
        m.learn(100, callback=lambda *a: True)


def test_cli_vectorized_dqn_seeds_write_ordinary_runs(tmp_path: object) -> None:
    from rlgrad.cli import main
    from rlgrad.cli.plot import load_run

    out = tmp_path / "runs"  # type: ignore[operator]
    code = main(["train", "CartPole-v1", "--algo", "dqn", "--seeds", "0-1", "--vectorize",
                 "--steps", "1024", "--set", "learning_starts=100", "--set", "train_freq=16",
                 "--set", "gradient_steps=2", "--set", "buffer_size=2000",
                 "--run-dir", str(out)])
    assert code == 0
    runs = [load_run(out / f"seed-{s}") for s in (0, 1)]
    for r in runs:  # a row per iteration of 16 steps (those with an episode's return so far)
        assert r.steps[-1] == 1024 and len(r.steps) > 50 and not np.any(r.steps % 16)
        assert r.config["hyperparams"]["compile_loop"] is True
    assert runs[0].values.tolist() != runs[1].values.tolist()  # two seeds, two runs


def test_no_gradient_steps_collects_only() -> None:
    """gradient_steps=0: eager never trains; the compiled loop fills its ring and moves nothing."""
    kw = {**CASES[0][3], "gradient_steps": 0}
    compiled = DQN("CartPole-v1", seed=2, compile_loop=True, **kw)
    start = [np.array(p._value) for p in compiled._params]
    compiled.learn(400)
    eager = use_key_streams(DQN("CartPole-v1", seed=2, vectorization_mode="functional", **kw))
    eager.learn(400)
    assert compiled._n_updates == eager._n_updates == 0
    assert all(np.array_equal(p._value, s) for p, s in zip(compiled._params, start))
    ring = compiled._loop_state["buf"]
    assert ring["size"][0] == eager.replay_buffer.size() == 300
    np.testing.assert_array_equal(ring["obs"][0], eager.replay_buffer.observations)



def test_debug_flag_prints_the_dqn_program(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    """``RLGRAD_LOOP_DEBUG=1`` prints DQN's program of one iteration, as it prints PPO's."""
    monkeypatch.setenv("RLGRAD_LOOP_DEBUG", "1")
    DQN("CartPole-v1", seed=0, compile_loop=True, learning_starts=8, train_freq=4, batch_size=8,
        buffer_size=64, policy_kwargs=dict(net_arch=[8])).learn(32)
    err = capsys.readouterr().err
    assert err.startswith("# ---- the program (one iteration):")
    assert "# ---- loop 1: a rlgrad.lax." in err


# Double DQN with soft syncs (640 steps: at 800 a near tie of seed 4's online Q-values, which
# picks Double DQN's action, rounds the other way in one of the two), QR-DQN, C51
NATIVE_CASES = [(*CASES[1][:2], 640, CASES[1][3]), CASES[4], CASES[5]]


@pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("algo, env_id, steps, kw", NATIVE_CASES,
                         ids=[c[0].__name__ for c in NATIVE_CASES])
def test_native_program_trains_as_the_numpy_replay(algo: type, env_id: str, steps: int, kw: dict,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Dozens of gradient steps of 2 seeds on native code equal the NumPy replay's (QR-DQN's
    and C51's native programs once trained 0.17 off it: GCC 12 vectorised ``where``'s select
    with a masked load from the wrong address)."""
    clear_programs()
    native = train_seeds(algo, env_id, [3, 4], steps, **kw)
    monkeypatch.setenv("RLGRAD_JIT_BACKEND", "numpy")
    replay = train_seeds(algo, env_id, [3, 4], steps, **kw)
    assert [m.loop_backend for m in native + replay] == ["native"] * 2 + ["numpy"] * 2
    for a, b in zip(native, replay):
        assert a._n_updates == b._n_updates >= 100
        start = algo(env_id, seed=a.seed, **kw)._params
        assert _max_diff(a._params, start) > 1000 * ATOL
        assert _max_diff(a._params, b._params) <= ATOL
        assert _max_diff(a._target_params, b._target_params) <= ATOL
        np.testing.assert_array_equal(a.loop_returns[1], b.loop_returns[1])


@pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
def test_the_probe_check_allows_float32_1e_5(monkeypatch: pytest.MonkeyPatch) -> None:
    """The program's first-call check runs at ``dqn.PROBE_CHECK_FLOAT32`` (1e-5 of each output's
    largest magnitude, not the default 1e-3; the reason is beside it), and the native code passes
    it (as for QR-DQN, C51 and Double DQN above)."""
    import rlgrad.native as native
    from rlgrad.rl.compiled_loop.dqn import PROBE_CHECK_FLOAT32

    seen = []
    verify = native._verify

    def spy(*args: object) -> None:
        seen.append(native._CHECK.get())
        verify(*args)

    monkeypatch.setattr(native, "_verify", spy)
    clear_programs()
    m = DQN("CartPole-v1", seed=3, compile_loop=True, **CASES[0][3])
    m.learn(100)
    assert PROBE_CHECK_FLOAT32 == 1e-5 and m.loop_backend == "native"
    assert seen == [{"float32": 1e-5, "float64": 1e-6}]


@pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
def test_the_native_check_covers_a_gradient_step(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A wrong lowering of an op of the backward pass alone (relu's gradient scaled by 1.5) is
    caught when the program is compiled, though the first iteration is a warm-up one: the
    NumPy replay runs, with a warning, and trains as eager DQN."""
    monkeypatch.setitem(LOWERINGS, "relu_grad",
                        _elementwise("{0} * ({T})({1} > 0) * ({T})1.5", "float"))
    clear_programs()
    kw = CASES[0][3]
    with caplog.at_level(logging.WARNING, logger="rlgrad.jit"):
        m = DQN("CartPole-v1", seed=3, compile_loop=True, **kw)
        m.learn(400)
    clear_programs()
    assert m.loop_backend == "numpy"
    assert any("native lowering failed" in r.getMessage() for r in caplog.records)
    eager = use_key_streams(DQN("CartPole-v1", seed=3, vectorization_mode="functional", **kw))
    eager.learn(400)
    assert _max_diff(m._params, eager._params) <= ATOL


@pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("t, max_norm", [(7.0, 10.0), (50.0, None), (100.0, 0.05)],
                         ids=["clip-loose", "flush", "flush-clip-tight"])
def test_fused_adam_native_is_its_reference_bit_for_bit(t: float, max_norm: float | None,
                                                        dtype: type) -> None:
    """``fused_adam``'s one C loop (rlgrad/_adam.h's arithmetic) against its NumPy reference
    (``_adam_math`` after the clip), every bit, and that against PyTorch's Adam after
    ``clip_grad_norm_`` (rounding apart; not at a flush step: PyTorch has none). Tiny moments
    (below each dtype's flush floor), zero gradients and huge steps included."""
    import rlgrad
    from rlgrad.rl.compiled_loop.dqn import _adam_clip, fused_adam

    rng = np.random.default_rng(int(t))
    S, P = 2, 1000
    p, g, m = (rng.standard_normal((S, P)).astype(dtype) for _ in range(3))
    v = np.abs(rng.standard_normal((S, P))).astype(dtype)
    tiny = np.finfo(dtype).tiny * 1e12  # (under the flush's floor, tiny * 1e13)
    m[:, :100], v[:, 100:200], g[:, :200] = tiny, tiny, 0.0
    kw = dict(b1=0.9, b2=0.999, eps=1e-8, max_norm=max_norm)
    step = rlgrad.jit(lambda *a: fused_adam(*a, **kw), backend="native")
    args = (p, g, m, v, np.full(S, t), np.array(2.3e-3))
    step(*args)
    assert step.backend == "native"
    got, want = step(*args), _adam_clip(*args, **kw)
    np.testing.assert_array_equal(got, want)
    if t % 50 == 0:  # (the flush ran: the tiny moments are zeros now, on both sides)
        assert not want[1, :, :100].any() and not want[2, :, 100:200].any()
    if t % 50 and dtype == np.float32:
        torch = pytest.importorskip("torch")
        for s in range(S):
            w = torch.nn.Parameter(torch.tensor(p[s]))
            opt = torch.optim.Adam([w], lr=2.3e-3, betas=(0.9, 0.999), eps=1e-8)
            w.grad = torch.tensor(g[s])
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_([w], max_norm)
            opt.step()  # a first step, then the state put where ours was (t - 1 steps)
            st = opt.state[w]
            st["step"].fill_(t - 1)
            st["exp_avg"].copy_(torch.tensor(m[s]))
            st["exp_avg_sq"].copy_(torch.tensor(v[s]))
            w.data.copy_(torch.tensor(p[s]))
            w.grad = torch.tensor(g[s])
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_([w], max_norm)
            opt.step()
            np.testing.assert_allclose(w.detach().numpy(), want[0, s], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(st["exp_avg_sq"].numpy(), want[2, s], rtol=1e-5, atol=1e-30)


@pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
def _ring_reference(ring: np.ndarray, rows: np.ndarray, k: np.ndarray, pos: np.ndarray
                    ) -> np.ndarray:
    """Per seed s, the first k[s] rows written in order from slot pos[s] on, around the ring
    (more rows than slots: the last N land)."""
    out = ring.copy()
    N = ring.shape[1]
    for s in range(ring.shape[0]):
        first = max(int(k[s]) - N, 0)
        out[s, (int(pos[s]) + np.arange(first, int(k[s]))) % N] = rows[s, first:int(k[s])]
    return out


def test_ring_write_native_is_its_reference() -> None:
    """The replay ring's write (``ops.write_rows`` at the slots ``_store`` computes) in C against
    a plain loop: rows wrapping around the ring's end, no row, and more rows than slots (the
    last ones land), for float rows and bool scalars."""
    import rlgrad
    import rlgrad.numpy as rnp
    from rlgrad import ops

    def ring_write(ring, rows, k, pos):  # noqa: ANN001, ANN202 - _store's slots and write
        r = rnp.arange(rows.shape[1])
        slots = rnp.where(r < k[..., None], rnp.mod(pos[..., None] + r, ring.shape[1]), -1)
        return ops.write_rows(ring, slots, rows)

    rng = np.random.default_rng(0)
    S, N, R = 3, 10, 13
    write = rlgrad.jit(ring_write, backend="native")
    for ring, rows in ((rng.standard_normal((S, N, 4)).astype(np.float32),
                        rng.standard_normal((S, R, 4)).astype(np.float32)),
                       (rng.random((S, N)) < 0.5, rng.random((S, R)) < 0.5)):
        for k, pos in (([3, 0, 13], [8, 2, 4]), ([10, 11, 1], [0, 9, 9])):
            args = (ring, rows, np.array(k), np.array(pos))
            write(*args)
            assert write.backend == "native"
            got = write(*args)
            np.testing.assert_array_equal(got, _ring_reference(*args))
            if k[0] == 3:  # slots 8, 9, 0; no row; rows 3..12 at slots 7, 8, ..., 6
                np.testing.assert_array_equal(got[0, [8, 9, 0]], rows[0, :3])
                np.testing.assert_array_equal(got[0, 1:8], ring[0, 1:8])
                np.testing.assert_array_equal(got[1], ring[1])
                np.testing.assert_array_equal(got[2, (7 + np.arange(10)) % 10], rows[2, 3:])
