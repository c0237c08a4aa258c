"""SB3's PPO warnings: a batch size that does not divide the rollout (the last minibatch is
smaller; rlgrad pads it with rows of weight 0, the same gradient), and an MLP policy asked to
run on a GPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rlgrad
from rlgrad.rl import PPO


@pytest.mark.parametrize(("n_steps", "n_envs", "batch_size", "full", "rest"),
                         [(64, 1, 63, 1, 1), (50, 2, 32, 3, 4)])
def test_truncated_minibatch_warning_names_the_sizes(n_steps: int, n_envs: int, batch_size: int,
                                                      full: int, rest: int) -> None:
    with pytest.warns(UserWarning, match=rf"size n_steps \* n_envs = {n_steps * n_envs}, after "
                      rf"every {full} untruncated mini-batches, there will be a truncated "
                      rf"mini-batch of size {rest};"):
        m = PPO("MlpPolicy", "Pendulum-v1", n_steps=n_steps, batch_size=batch_size,
                n_envs=n_envs, n_epochs=1, seed=0)
    m.learn(n_steps * n_envs)
    assert m._n_updates == 1 and all(np.isfinite(p.detach().numpy()).all()
                                     for p in m.policy.parameters())


def test_no_warning_when_the_batch_size_divides_the_rollout() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=32, seed=0)


def test_gpu_recommendation_only_for_a_cuda_device() -> None:
    m = PPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=32, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m._maybe_recommend_cpu()  # the CPU: nothing to recommend
    m.device = rlgrad.device("cuda")
    with pytest.warns(UserWarning, match="You are trying to run PPO on the GPU"):
        m._maybe_recommend_cpu()
