"""Pixels wired into the algorithms, the API and the CLI: the trunk chosen from the observation
space, uint8 observations kept as such until the network, the frame-deduplicated replay in DQN's
own collection loop, Atari logs in raw game score, presets, and short CLI runs (train, eval
--video, resume after kill -9, bad input in one line)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

pytest.importorskip("ale_py", reason="the atari extra (pip install 'rlgrad[atari]') is not installed")
pytest.importorskip("minatar")

import rlgrad  # noqa: E402
from rlgrad.rl import A2C, C51, DQN, PPO, QRDQN, CrossQ, load_preset  # noqa: E402
from rlgrad.rl.atari import GAME_RETURN, RecordGameStatistics  # noqa: E402
from rlgrad.rl.buffers import ReplayBuffer  # noqa: E402
from rlgrad.rl.cnn import MinAtarCNN, NatureCNN  # noqa: E402
from rlgrad.rl.envs import make_vec_env  # noqa: E402
from rlgrad.rl.frame_replay import FrameReplayBuffer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class ImageBoxEnv(gym.Env):
    """Image observations with a continuous action: for the MLP-only algorithms' refusal."""

    observation_space = spaces.Box(0, 255, (3, 12, 12), np.uint8)
    action_space = spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


class DictObsEnv(ImageBoxEnv):
    # (a Dict of vectors is taken, flattened; an image entry needs the CNN extractor, which
    # CrossQ's batch-normalised critics do not have)
    observation_space = spaces.Dict({"a": spaces.Box(-1, 1, (2,), np.float32),
                                     "img": spaces.Box(0, 255, (1, 16, 16), np.uint8)})


# ---- the trunk from the observation space -------------------------------------------------------
def test_policies_choose_their_trunk_from_the_observation_space():
    ppo = PPO("MinAtar/Breakout-v1", n_envs=2, n_steps=8, batch_size=16)
    assert ppo.policy_name == "CnnPolicy"
    trunk = ppo.policy.features_extractor
    assert isinstance(trunk, MinAtarCNN) and not trunk.normalize  # 0/1 input: not divided
    # one trunk shared by the heads, which sit right on its 128 features (SB3's CnnPolicy)
    assert ppo.policy.action_net.weight.shape == (3, 128)
    assert ppo.policy.value_net.weight.shape == (1, 128)
    assert ppo.rollout_buffer.observations.dtype == np.uint8
    assert ppo.rollout_buffer.observations.shape == (8, 2, 4, 10, 10)

    dqn = DQN("ALE/Pong-v5", buffer_size=1000, learning_starts=10)
    assert isinstance(dqn.q_net[0], NatureCNN) and dqn.q_net[0].normalize  # uint8 / 255 inside
    assert dqn.q_net[1].weight.shape == (6, 512)
    assert isinstance(dqn.replay_buffer, FrameReplayBuffer)
    assert isinstance(DQN("MinAtar/Breakout-v1", buffer_size=100).replay_buffer, ReplayBuffer)
    q = QRDQN("MinAtar/Breakout-v1", buffer_size=100, policy_kwargs={"n_quantiles": 5})
    assert q.q_net[1].weight.shape == (3 * 5, 128)
    c = C51("MinAtar/Breakout-v1", buffer_size=100, policy_kwargs={"n_atoms": 7})
    assert c.q_net[1].weight.shape == (3 * 7, 128)
    assert type(PPO("CartPole-v1").policy.features_extractor).__name__ == "FlattenExtractor"
    a2c = A2C("MinAtar/Breakout-v1", policy="CnnPolicy", policy_kwargs={"features_dim": 32})
    assert a2c.policy.features_extractor[3].weight.shape == (32, 1024)


def test_policy_mismatches_are_one_line():
    cases = [
        (lambda: PPO("MinAtar/Breakout-v1", policy="MlpPolicy"), "MlpPolicy takes vector"),
        (lambda: DQN("CartPole-v1", policy="CnnPolicy"), "CnnPolicy needs image observations"),
        (lambda: CrossQ(ImageBoxEnv()), "CrossQ has MLP networks only"),
        (lambda: CrossQ(DictObsEnv()), "image entries need a CNN extractor"),
        (lambda: PPO("MinAtar/Breakout-v1", normalize=True), "scaled inside the CNN"),
        (lambda: PPO("CartPole-v1", policy="ConvPolicy"), "unknown policy 'ConvPolicy'"),
    ]
    for make, match in cases:
        with pytest.raises(ValueError, match=match) as ei:
            make()
        assert "\n" not in str(ei.value)


def test_shared_trunk_loss_gradient_matches_finite_differences():
    """A2C's loss through the shared MinAtar trunk, float64: the gradient of one conv weight and
    one trunk bias (both reached through the actor and the critic) against central differences."""
    old = rlgrad.get_default_dtype()
    rlgrad.set_default_dtype(np.float64)
    try:
        algo = A2C("MinAtar/Breakout-v1", n_envs=2, n_steps=4, ent_coef=0.01)
    finally:
        rlgrad.set_default_dtype(old)
    pol = algo.policy
    assert pol.features_extractor[0].weight._value.dtype == np.float64
    rng = np.random.default_rng(0)
    n = 6
    b = {"obs": rng.integers(0, 2, (n, 4, 10, 10)).astype(np.uint8),
         "actions": rng.integers(0, 3, n), "advantages": rng.standard_normal(n),
         "returns": rng.standard_normal(n), "weights": np.full(n, 1 / n),
         "coefs": np.array([0.5, 0.01])}

    def loss_value():
        return float(algo.loss(b, True)[0]._value)

    loss, _ = algo.loss(b, True)
    loss.backward()
    for p, idx in ((pol.features_extractor[0].weight, (3, 1, 1, 2)),
                   (pol.features_extractor[3].bias, (7,))):
        g = p.grad._value[idx]
        h, x0 = 1e-6, p._value[idx]
        p._value[idx] = x0 + h
        up = loss_value()
        p._value[idx] = x0 - h
        down = loss_value()
        p._value[idx] = x0
        assert g == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-9)
    # the trunk is run once for both heads and gives what the two separate calls give
    dist, v = pol.distribution_and_value(b["obs"])
    np.testing.assert_allclose(v._value, pol.value(b["obs"])._value, rtol=1e-12)
    np.testing.assert_allclose(dist.logits._value, pol.distribution(b["obs"]).logits._value, rtol=1e-12)


# ---- replay and statistics inside the real loops ---------------------------------------------------
class _Tee(FrameReplayBuffer):
    """The DQN's frame buffer, also feeding a plain buffer of whole stacks the same rows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plain = ReplayBuffer(self.buffer_size, (self.stack, *self.frame_shape), (), np.int64,
                                  obs_dtype=np.uint8)

    def add(self, obs, next_obs, actions, rewards, terminated, truncated, env_ids=None):
        super().add(obs, next_obs, actions, rewards, terminated, truncated, env_ids)
        self.plain.add(obs, next_obs, actions, rewards, terminated, truncated)


def test_dqn_frame_replay_rebuilds_what_the_atari_envs_gave(monkeypatch):
    """Breakout with life-loss soft resets, FIRE resets, NEXT_STEP autoreset and 2 envs through
    DQN's collection loop: every stored transition equals the stacks FrameStackObservation gave."""
    import rlgrad.rl.off_policy as off_policy

    monkeypatch.setattr(off_policy, "FrameReplayBuffer", _Tee)
    dqn = DQN("ALE/Breakout-v5", n_envs=2, buffer_size=5000, learning_starts=10_000)
    dqn.learn(700)
    rb = dqn.replay_buffer
    assert isinstance(rb, _Tee) and rb.size() == rb.plain.size() > 600
    assert rb.terminated.sum() >= 3  # lives were lost
    b, ref = rb.take(np.arange(rb.size())), rb.plain.take(np.arange(rb.size()))
    for mine, theirs in zip(b, ref):
        np.testing.assert_array_equal(mine, theirs)
    # memory: the frames once (plus the segment starts), not 2 x 4 per transition
    assert rb.frames_added < 1.2 * rb.size()


def test_one_million_transition_bytes():
    """Bytes per stored transition of a 1M Atari frame buffer: one 84x84 frame (+5% slack for
    short episodes) with its two int64 links, and the row (npos, action, reward, two flags)."""
    rb = FrameReplayBuffer(1_000_000, (4, 84, 84), n_envs=8)
    per_frame = 84 * 84 + 8 + 8
    per_row = 8 + 8 + 4 + 1 + 1
    assert rb.nbytes() == 1_050_000 * per_frame + 1_000_000 * per_row + 8 * 8
    assert rb.nbytes() / 1e9 == pytest.approx(7.448, abs=1e-3) and rb.nbytes() <= 7.5e9
    # SB3's ReplayBuffer keeps obs and next_obs stacks: 2 * 4 * 84 * 84 bytes a transition
    assert 2 * 4 * 84 * 84 * 1_000_000 / rb.nbytes() > 7.5


def test_atari_logs_whole_games_in_raw_score():
    venv = make_vec_env("ALE/SpaceInvaders-v5", n_envs=2)
    assert isinstance(venv, RecordGameStatistics)
    venv.reset(seed=0)
    rng = np.random.default_rng(0)
    games, life_ends = [], 0
    for _ in range(1500):
        _, r, term, trunc, info = venv.step(rng.integers(0, 6, 2))
        assert set(np.unique(r)) <= {0.0, 1.0}  # training rewards are clipped
        life_ends += int((term | trunc).sum())
        if "_" + GAME_RETURN in info:
            games += list(info[GAME_RETURN][info["_" + GAME_RETURN]])
    assert len(games) >= 1 and life_ends >= 3 * len(games)
    assert venv.episode_count == len(games) and list(venv.return_queue) == games
    assert all(g % 5 == 0 for g in games) and max(games) > 30  # invaders' points, unclipped


def test_checkpoints_keep_the_raw_game_statistics(tmp_path):
    """A resumed Atari (or MinAtar) run's ep_rew_mean continues from the games the checkpoint had
    seen: the pixel envs are not snapshot (they restart from a reset), their statistics are."""
    dqn = DQN("ALE/Breakout-v5", buffer_size=2000, learning_starts=10_000, seed=0)
    dqn.learn(700)
    st = dqn._ep_stats
    assert isinstance(st, RecordGameStatistics) and st.episode_count >= 1
    games, lengths = list(st.return_queue), list(st.length_queue)
    dqn.save(str(tmp_path / "dqn"))
    loaded = DQN.load(str(tmp_path / "dqn"))
    new = loaded._ep_stats
    assert isinstance(new, RecordGameStatistics) and new is not st
    assert list(new.return_queue) == games and list(new.length_queue) == lengths
    assert new.episode_count == st.episode_count and new.return_queue.maxlen == 100
    loaded.learn(20, reset_num_timesteps=False)  # continuing: the env resets, the games stay
    assert list(loaded._ep_stats.return_queue)[:len(games)] == games
    loaded._record_rollout_stats()
    assert loaded.logger.name_to_value["rollout/ep_rew_mean"] > 0  # Breakout: bricks were hit

    ppo = PPO("MinAtar/Breakout-v1", n_envs=2, n_steps=128, batch_size=64, seed=0)
    ppo.learn(512)
    assert ppo._ep_stats.episode_count >= 2
    ppo.save(str(tmp_path / "ppo"))
    loaded = PPO.load(str(tmp_path / "ppo"))
    assert list(loaded._ep_stats.return_queue) == list(ppo._ep_stats.return_queue)
    assert loaded._ep_stats.episode_count == ppo._ep_stats.episode_count


def test_save_load_predicts_the_same_actions(tmp_path):
    obs = np.random.default_rng(1).integers(0, 2, (5, 4, 10, 10)).astype(np.uint8)
    for cls in (DQN, PPO):
        algo = cls("MinAtar/Breakout-v1", **({"learning_starts": 50} if cls is DQN else {}))
        algo.learn(200)
        algo.save(str(tmp_path / "m.safetensors"))
        loaded = cls.load(str(tmp_path / "m.safetensors"))
        assert loaded.policy_name == "CnnPolicy"
        np.testing.assert_array_equal(loaded.predict(obs)[0], algo.predict(obs)[0])
        assert loaded.predict(obs[0])[0].shape == ()


def test_presets_apply_to_every_atari_and_minatar_id():
    for env_id in ("ALE/Breakout-v5", "PongNoFrameskip-v4", "ALE/Seaquest-v5"):
        assert load_preset("dqn", env_id)["target_update_interval"] == 1000
        assert load_preset("ppo", env_id)["clip_range"] == "lin_0.1"
        assert load_preset("a2c", env_id)["vf_coef"] == 0.25
    assert load_preset("dqn", "MinAtar/Asterix-v1")["learning_starts"] == 5000
    assert load_preset("ppo", "MinAtar/Breakout-v1")["gae_lambda"] == 0.95
    with pytest.raises(ValueError, match="no a2c preset"):
        load_preset("a2c", "MinAtar/Breakout-v1")


def test_minatar_dqn_explores_over_the_papers_absolute_steps():
    """The MinAtar preset's epsilon goes 1 -> 0.1 over the first 100k steps whatever the budget
    given to learn (SB3's exploration_fraction is relative to it: 2% of a 60k-step run is 1,200
    steps); exploration_steps is absolute, across continued learn calls too."""
    hp = load_preset("dqn", "MinAtar/Breakout-v1")
    assert hp["exploration_steps"] == 100_000 and "exploration_fraction" not in hp
    rates = []
    for budget in (400, 5000):
        dqn = DQN("MinAtar/Breakout-v1", buffer_size=500, learning_starts=10**6, seed=0,
                  exploration_final_eps=0.1, exploration_steps=1000)
        dqn.learn(budget, callback=lambda m: m.num_timesteps < 400)
        rates.append(dqn.exploration_rate)
    assert rates[0] == rates[1] == pytest.approx(1.0 - 0.9 * 400 / 1000)
    dqn.learn(800, reset_num_timesteps=False)  # steps 400 -> 1200: past the 1000 steps
    assert dqn.exploration_rate == pytest.approx(0.1, abs=1e-15)
    relative = DQN("MinAtar/Breakout-v1", buffer_size=500, learning_starts=10**6,
                   exploration_final_eps=0.1, exploration_fraction=0.5)
    relative.learn(400)
    assert relative.exploration_rate == 0.1  # SB3's: half of this learn call's 400 steps


# ---- the command line --------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlgrad.cli", *args], capture_output=True,
                          text=True, env=_env(), timeout=timeout)


def _rows(run: Path) -> list[str]:
    p = run / "metrics.csv"
    return p.read_text().splitlines() if p.exists() else []


def test_cli_minatar_dqn_and_ppo_train_eval_and_video(tmp_path):
    run = tmp_path / "dqn"
    p = cli("train", "MinAtar/Breakout-v1", "--algo", "dqn", "--steps", "2500", "--run-dir",
            str(run), "--set", "learning_starts=500", "--set", "buffer_size=5000",
            "--checkpoint-every", "1000", "--no-progress")
    assert p.returncode == 0, p.stderr
    cfg = (run / "config.yaml").read_text()
    assert "CnnPolicy" in cfg and "preset: minatar" in cfg  # the family preset, overridden
    video = tmp_path / "minatar.gif"
    p = cli("eval", str(run), "--episodes", "2", "--video", str(video))
    assert p.returncode == 0, p.stderr
    assert video.read_bytes()[:6] == b"GIF89a" and "video:" in p.stdout

    run = tmp_path / "ppo"
    p = cli("train", "MinAtar/Breakout-v1", "--algo", "ppo", "--steps", "2048", "--run-dir",
            str(run), "--set", "n_envs=4", "--set", "n_steps=64", "--no-progress")
    assert p.returncode == 0, p.stderr
    assert len(_rows(run)) > 1


def _checkpoint_step(run: Path) -> int:
    try:
        return int(rlgrad.load(run / "checkpoint.safetensors")["run"]["num_timesteps"])
    except Exception:  # not written yet (saves are atomic renames: never half a file)
        return -1


def test_cli_atari_dqn_train_eval_video_and_resume_after_kill(tmp_path):
    run = tmp_path / "breakout"
    args = ["train", "ALE/Breakout-v5", "--algo", "dqn", "--steps", "1000", "--run-dir", str(run),
            "--set", "learning_starts=300", "--set", "buffer_size=3000", "--set",
            "target_update_interval=200", "--checkpoint-every", "300", "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "rlgrad.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    t0 = time.time()
    while _checkpoint_step(run) < 300:  # killed once a checkpoint past the warm-up is written
        assert proc.poll() is None, proc.communicate()
        assert time.time() - t0 < 240, "no checkpoint"
        time.sleep(0.05)
    proc.kill()
    proc.communicate(timeout=30)
    step = rlgrad.load(run / "checkpoint.safetensors")["run"]["num_timesteps"]
    assert 300 <= step < 1000
    p = cli("resume", str(run), "--no-progress")
    assert p.returncode == 0, p.stderr
    assert rlgrad.load(run / "checkpoint.safetensors")["run"]["num_timesteps"] >= 1000
    # logged episode returns are whole games' raw scores: Breakout's bricks are worth 1 to 7
    header, *rows = [r.split(",") for r in _rows(run)]
    col = header.index("rollout/ep_rew_mean")
    assert any(r[col] for r in rows)

    video = tmp_path / "breakout.gif"
    p = cli("eval", str(run), "--episodes", "1", "--video", str(video), "--max-frames", "300")
    assert p.returncode == 0, p.stderr
    assert video.read_bytes()[:6] == b"GIF89a" and "mean return" in p.stdout


def test_cli_bad_pixel_input_is_one_line(monkeypatch, capsys):
    from rlgrad.cli import main

    def one_line(args, match):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and match in err, err

    one_line(["train", "ALE/Breakot-v5", "--algo", "dqn"], "Did you mean: ALE/Breakout-v5")
    one_line(["train", "MinAtar/Breakout-v1", "--algo", "dqn", "--set", "policy=MlpPolicy"],
             "MlpPolicy takes vector observations")
    one_line(["train", "MinAtar/Breakout-v1", "--algo", "sac"], "Discrete")
    one_line(["train", "MinAtar/Breakout-v3", "--algo", "ppo"], "Did you mean: MinAtar/Breakout-v")
    monkeypatch.setitem(sys.modules, "ale_py", None)
    one_line(["train", "ALE/Pong-v5", "--algo", "dqn"], "pip install 'rlgrad[atari]'")
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    one_line(["train", "MinAtar/Asterix-v1", "--algo", "ppo"], "pip install 'rlgrad[atari]'")


def test_cli_atari_a2c_trains_on_its_zoo_preset_and_logs_raw_games(tmp_path):
    """A2C (and through it the on-policy loop) on Atari from the CLI: the zoo's atari preset, the
    shared Nature CNN trunk, whole-game raw scores in the logs."""
    run = tmp_path / "a2c"
    p = cli("train", "ALE/Breakout-v5", "--algo", "a2c", "--steps", "2000", "--run-dir", str(run),
            "--set", "n_envs=4", "--no-progress")
    assert p.returncode == 0, p.stderr
    cfg = (run / "config.yaml").read_text()
    assert "preset: atari" in cfg and "CnnPolicy" in cfg
    header, *rows = [r.split(",") for r in _rows(run)]
    assert rows and "rollout/ep_rew_mean" in header


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_cnn_loss_and_gradients_equal_sb3s_with_copied_weights(algo):
    """One PPO / A2C loss on a fixed batch of Breakout frame stacks: rlgrad's (eager and compiled)
    and SB3's ``CnnPolicy`` written as its ``train`` computes it, the weights copied from SB3's
    policy; loss terms and every gradient agree to float32 rounding."""
    torch = pytest.importorskip("torch")
    sb3 = pytest.importorskip("stable_baselines3")
    import ale_py
    from stable_baselines3.common.env_util import make_atari_env as sb3_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    torch.set_num_threads(1)
    env = VecFrameStack(sb3_atari_env("BreakoutNoFrameskip-v4", n_envs=1, seed=0), 4)
    rng = np.random.default_rng(0)
    frames = [env.reset()[0]] + [env.step(rng.integers(4, size=1))[0][0] for _ in range(31)]
    obs = np.ascontiguousarray(np.stack(frames).transpose(0, 3, 1, 2))  # SB3 transposes as well
    n = len(obs)
    actions = rng.integers(4, size=n)
    adv = rng.standard_normal(n).astype(np.float32)
    returns = rng.standard_normal(n).astype(np.float32)
    kw = {"n_steps": 8, "batch_size": 8} if algo == "ppo" else {}
    theirs = {"ppo": sb3.PPO, "a2c": sb3.A2C}[algo]("CnnPolicy", env, seed=0, ent_coef=0.01, **kw)
    ours = {"ppo": PPO, "a2c": A2C}[algo]("BreakoutNoFrameskip-v4", n_envs=1, seed=0,
                                          ent_coef=0.01, **kw)
    # every key, the shared extractor's pi_/vf_ copies included: rlgrad's policy lists them too
    sd = {k: v.detach().numpy() for k, v in theirs.policy.state_dict().items()}
    ours.policy.load_state_dict({k.replace("cnn.", "").replace("linear.0", "7"): v
                                 for k, v in sd.items()})
    tobs, tact = torch.as_tensor(obs), torch.as_tensor(actions)
    # a policy a little away from uniform, and old log-probabilities a little off the new ones
    with torch.no_grad():
        theirs.policy.action_net.weight.mul_(30.0)
    ours.policy.action_net.weight._value[...] = theirs.policy.action_net.weight.detach().numpy()
    with torch.no_grad():
        old_lp = (theirs.policy.evaluate_actions(tobs, tact)[1].numpy()
                  + rng.normal(scale=0.1, size=n)).astype(np.float32)
    values, lp, ent = theirs.policy.evaluate_actions(tobs, tact)
    tadv = torch.as_tensor(adv)
    if algo == "ppo":
        ratio = torch.exp(lp - torch.as_tensor(old_lp))
        pl = -torch.min(tadv * ratio, tadv * torch.clamp(ratio, 0.9, 1.1)).mean()
    else:
        pl = -(tadv * lp).mean()
    vl = torch.nn.functional.mse_loss(torch.as_tensor(returns), values.flatten())
    el = -ent.mean()
    loss = pl + 0.01 * el + theirs.vf_coef * vl
    loss.backward()
    grads = [p.grad.numpy() for k, p in theirs.policy.named_parameters()
             if not k.startswith(("pi_", "vf_"))]
    b = {"obs": obs, "actions": ours.policy.actions_for_loss(actions), "advantages": adv,
         "returns": returns, "weights": np.full(n, 1 / n, np.float32), "old_log_prob": old_lp,
         "old_values": np.zeros(n, np.float32),
         "coefs": np.array([theirs.vf_coef, 0.01], np.float32), "clip": np.array(0.1, np.float32)}
    for compiled in (False, True):
        our_loss, terms, our_grads = ours._loss_step(compiled)(b, True)
        for mine, ref in ((our_loss, loss), (terms["policy_loss"], pl), (terms["value_loss"], vl),
                          (terms["entropy_loss"], el)):
            assert float(np.asarray(mine)) == pytest.approx(ref.item(), rel=1e-4, abs=1e-6)
        for g, ref in zip(our_grads, grads, strict=True):
            err = np.abs(np.asarray(g) - ref).max() / np.abs(ref).max()
            assert err < 1e-4
