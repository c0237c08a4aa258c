"""``stable_baselines3.common.vec_env``: SB3's VecEnv stack (``rlgrad.rl.vec_env`` and the
wrappers of this package, one module each as SB3 has them)."""

from rlgrad.rl.common.vec_env.stacked_observations import StackedObservations
from rlgrad.rl.common.vec_env.vec_extract_dict_obs import VecExtractDictObs
from rlgrad.rl.common.vec_env.vec_frame_stack import VecFrameStack
from rlgrad.rl.common.vec_env.vec_monitor import VecMonitor
from rlgrad.rl.common.vec_env.vec_transpose import VecTransposeImage
from rlgrad.rl.common.vec_env.vec_video_recorder import VecVideoRecorder
from rlgrad.rl.vec_env import (
    CloudpickleWrapper,
    DummyVecEnv,
    SubprocVecEnv,
    VecCheckNan,
    VecEnv,
    VecEnvWrapper,
    VecNormalize,
    is_vecenv_wrapped,
    sync_envs_normalization,
    unwrap_vec_normalize,
    unwrap_vec_wrapper,
)

__all__ = ["CloudpickleWrapper", "DummyVecEnv", "StackedObservations", "SubprocVecEnv",
           "VecCheckNan", "VecEnv", "VecEnvWrapper", "VecExtractDictObs", "VecFrameStack",
           "VecMonitor", "VecNormalize", "VecTransposeImage", "VecVideoRecorder",
           "is_vecenv_wrapped", "sync_envs_normalization", "unwrap_vec_normalize",
           "unwrap_vec_wrapper"]
