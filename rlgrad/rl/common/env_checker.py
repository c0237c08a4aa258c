"""``stable_baselines3.common.env_checker.check_env``: SB3's checker of a custom environment
(Gymnasium's ``check_env`` stays under Gymnasium's name, ``gymnasium.utils.env_checker``).

It asserts what would break training (spaces that are not Gymnasium spaces, ``reset`` /
``step`` returning values that do not match the spaces, a goal-conditioned env whose
``compute_reward`` is not vectorised, NaN or inf in observations or rewards) and, with
``warn``, warns about what SB3 and rlgrad do not support or handle badly (Tuple, Sequence,
Graph, OneOf, nested Dict, non-zero-start Discrete spaces, small or non-uint8 images,
unnormalised or non-float32 Box actions). Failed checks raise ``EnvCheckError``: an
``AssertionError`` as SB3's, and a ``ValueError``.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlgrad.rl.common.preprocessing import check_for_nested_spaces, is_image_space_channels_first
from rlgrad.rl.vec_env import DummyVecEnv, VecCheckNan


class EnvCheckError(AssertionError, ValueError):
    """An environment that does not follow Gymnasium's API as SB3 needs it."""


def _require(ok: Any, message: str) -> None:
    if not ok:
        raise EnvCheckError(message)


def _warn(message: str) -> None:
    warnings.warn(message, UserWarning, stacklevel=3)


def _check_non_zero_start(space: spaces.Space, kind: str = "observation", key: str = "") -> None:
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete) and not np.allclose(
            space.start, 0):
        where = f"(key='{key}') " if key else ""
        _warn(f"{type(space).__name__} {kind} space {where}with a non-zero start "
              f"(start={space.start}) is not supported by Stable-Baselines3: use a wrapper or "
              f"update your {kind} space.")


def _check_image_input(space: spaces.Box, key: str = "") -> None:
    if space.dtype != np.uint8:
        _warn(f"It seems that your observation {key} is an image but its `dtype` is "
              f"({space.dtype}) whereas it has to be `np.uint8`; if it is not an image, flatten "
              "it to a 1D vector")
    if np.any(space.low != 0) or np.any(space.high != 255):
        _warn(f"It seems that your observation space {key} is an image but the upper and lower "
              "bounds are not in [0, 255]; the CNN policy scales images by 255")
    side = -1 if is_image_space_channels_first(space) else 0
    if space.shape[side] < 36 or space.shape[1] < 36:
        _warn("The minimal resolution for an image is 36x36 for the default `CnnPolicy`: use "
              "a custom features extractor for smaller ones")


def _subspaces(space: spaces.Space) -> list[tuple[str, spaces.Space]]:
    if isinstance(space, spaces.Dict):
        return list(space.spaces.items())
    if isinstance(space, spaces.Tuple):
        return [("", s) for s in space.spaces]
    return []


def _check_unsupported_spaces(obs_space: spaces.Space, act_space: spaces.Space) -> bool:
    """Warnings for spaces SB3 does not support; True when the returned values cannot be
    checked (Sequence, Graph, OneOf observations)."""
    subs = _subspaces(obs_space)
    for key, sub in subs if isinstance(obs_space, spaces.Dict) else []:
        _check_non_zero_start(sub, "observation", key)
    if any(isinstance(s, spaces.Dict) for _, s in subs) and isinstance(obs_space, spaces.Dict):
        _warn("Nested observation spaces are not supported by Stable Baselines3 (Dict spaces "
              "inside Dict space): flatten it to one level of keys.")
    if isinstance(obs_space, spaces.MultiDiscrete) and obs_space.nvec.ndim > 1:
        _warn(f"The MultiDiscrete observation space uses a multidimensional array "
              f"{obs_space.nvec}, not supported: flatten it to a 1D array with a wrapper.")
    if isinstance(obs_space, spaces.Tuple):
        _warn("The observation space is a Tuple, not supported by Stable Baselines3: convert it "
              "to a Dict observation space, which is supported.")
    skip = False
    kinds = [obs_space, *(s for _, s in subs)]
    if isinstance(obs_space, getattr(spaces, "OneOf", ())):
        _warn("OneOf observation space is not supported by Stable-Baselines3. Note: The checks "
              "for returned values are skipped.")
        skip = True
    _check_non_zero_start(obs_space, "observation")
    if any(isinstance(s, spaces.Sequence) for s in kinds):
        _warn("Sequence observation space is not supported by Stable-Baselines3: pad your "
              "observation to a fixed size.\nNote: The checks for returned values are skipped.")
        skip = True
    if any(isinstance(s, spaces.Graph) for s in kinds):
        _warn("Graph observation space is not supported by Stable-Baselines3. Note: The checks "
              "for returned values are skipped.")
        skip = True
    if isinstance(act_space, spaces.MultiDiscrete) and act_space.nvec.ndim > 1:
        _warn(f"The MultiDiscrete action space uses a multidimensional array {act_space.nvec}, "
              "not supported: flatten it to a 1D array with a wrapper.")
    _check_non_zero_start(act_space, "action")
    if isinstance(act_space, spaces.Dict | spaces.Tuple):
        _warn("The action space is not based off a numpy array (a Dict or Tuple space), not "
              "supported by Stable Baselines 3: flatten the action with a wrapper.")
    return skip


def _check_obs(obs: Any, space: spaces.Space, method: str) -> None:
    """The observation matches the space: type, shape, dtype, bounds."""
    if not isinstance(space, spaces.Tuple):
        _require(not isinstance(obs, tuple), f"The observation returned by the `{method}()` "
                 "method should be a single value, not a tuple")
    if isinstance(space, spaces.Discrete):
        _require(np.issubdtype(type(obs), np.integer),
                 f"The observation returned by `{method}()` method must be an int")
    elif not isinstance(space, spaces.Dict | spaces.Tuple):
        _require(isinstance(obs, np.ndarray),
                 f"The observation returned by `{method}()` method must be a numpy array")
    if isinstance(obs, np.ndarray):
        _require(space.shape == obs.shape, f"The observation returned by the `{method}()` method "
                 f"does not match the shape of the given observation space {space}. Expected: "
                 f"{space.shape}, actual shape: {obs.shape}")
        _require(space.dtype is None or np.can_cast(obs.dtype, space.dtype),
                 f"The observation returned by the `{method}()` method does not match the data "
                 f"type (cannot cast) of the given "
                 f"observation space {space}. Expected: {space.dtype}, actual dtype: {obs.dtype}")
        if isinstance(space, spaces.Box):
            bad = np.argwhere((obs < space.low) | (obs > space.high))
            _require(len(bad) == 0, f"The observation returned by the `{method}()` method does "
                     f"not match the bounds of the given observation space {space}: {len(bad)} "
                     "invalid indices: " + "; ".join(
                         f"Expected: {space.low[tuple(i)]} <= obs[{','.join(map(str, i))}] <= "
                         f"{space.high[tuple(i)]}, actual value: {obs[tuple(i)]}" for i in bad))
    _require(space.contains(obs), f"The observation returned by the `{method}()` method does not "
             f"match the given observation space {space}")


def _check_dict_obs(env: gym.Env, obs: Any, space: spaces.Space, method: str) -> None:
    if _is_goal_env(env):
        _require(isinstance(space, spaces.Dict), "a goal-conditioned env needs a Dict space")
        _check_goal_env_obs(cast(spaces.Dict, space), method)
    if not isinstance(space, spaces.Dict):
        _check_obs(obs, space, method)
        return
    _require(isinstance(obs, dict), f"The observation returned by `{method}()` must be a "
             "dictionary")
    if obs.keys() != space.spaces.keys():
        raise EnvCheckError(f"The observation keys returned by `{method}()` must match the "
                            f"observation space keys: {obs.keys()} != {space.spaces.keys()}")
    for key, sub in space.spaces.items():
        try:
            _check_obs(obs[key], sub, method)
        except AssertionError as e:
            raise EnvCheckError(f"Error while checking key={key}: {e}") from None


def _is_goal_env(env: gym.Env) -> bool:
    return hasattr(env.unwrapped, "compute_reward")


def _check_goal_env_obs(space: spaces.Dict, method: str) -> None:
    keys = list(space.spaces)
    _require(len(keys) >= 3, "A goal conditioned env must contain at least 3 observation keys: "
             f"`observation`, `achieved_goal`, and `desired_goal`. The current observation "
             f"contains {len(keys)} keys: {keys}")
    for key in ("achieved_goal", "desired_goal"):
        _require(key in space.spaces, f"The observation returned by the `{method}()` method of "
                 f"a goal-conditioned env requires the '{key}' key to be part of the observation "
                 f"dictionary. Current keys are {keys}")


def _check_goal_env_compute_reward(obs: dict[str, Any], env: gym.Env, reward: float,
                                   info: dict[str, Any]) -> None:
    """The reward is ``compute_reward``'s, and ``compute_reward`` takes batches."""
    achieved, desired = obs["achieved_goal"], obs["desired_goal"]
    _require(reward == env.compute_reward(achieved, desired, info),  # type: ignore[attr-defined]
             "The reward was not computed with `compute_reward()`")
    achieved, desired = np.asarray(achieved), np.asarray(desired)
    batch_a, batch_d = np.array([achieved, achieved]), np.array([desired, desired])
    if achieved.ndim == 0:
        batch_a, batch_d = batch_a.reshape(2, 1), batch_d.reshape(2, 1)
    rewards = env.compute_reward(batch_a, batch_d, np.array([info, info]))  # type: ignore[attr-defined]
    _require(np.shape(rewards) == (2,), f"Unexpected shape for vectorized computation of reward: "
             f"{np.shape(rewards)} != (2,)")
    _require(rewards[0] == reward, f"Vectorized computation of reward differs from single "
             f"computation: {rewards[0]} != {reward}")


def _check_returned_values(env: gym.Env, obs_space: spaces.Space, act_space: spaces.Space) -> None:
    out = env.reset()
    _require(isinstance(out, tuple), "`reset()` must return a tuple (obs, info)")
    _require(len(out) == 2, f"`reset()` must return a tuple of size 2 (obs, info), not {len(out)}")
    obs, info = out
    _require(isinstance(info, dict), "The second element of the tuple return by `reset()` must "
             f"be a dictionary not {info}")
    _check_dict_obs(env, obs, obs_space, "reset")
    data = env.step(act_space.sample())
    _require(len(data) == 5, "The `step()` method must return five values: obs, reward, "
             f"terminated, truncated, info. Actual: {len(data)} values returned.")
    obs, reward, terminated, truncated, info = data
    _check_dict_obs(env, obs, obs_space, "step")
    _require(isinstance(reward, float | int), "The reward returned by `step()` must be a float")
    _require(isinstance(terminated, bool), "The `terminated` signal must be a boolean")
    _require(isinstance(truncated, bool), "The `truncated` signal must be a boolean")
    _require(isinstance(info, dict), "The `info` returned by `step()` must be a python dictionary")
    if _is_goal_env(env):
        _check_goal_env_compute_reward(obs, env, float(reward), info)


def _check_spaces(env: gym.Env) -> None:
    ref = "cf. https://gymnasium.farama.org/api/spaces/"
    _require(hasattr(env, "observation_space"), f"You must specify an observation space ({ref})")
    _require(hasattr(env, "action_space"), f"You must specify an action space ({ref})")
    _require(isinstance(env.observation_space, spaces.Space),
             f"The observation space must inherit from gymnasium.spaces ({ref})")
    _require(isinstance(env.action_space, spaces.Space),
             f"The action space must inherit from gymnasium.spaces ({ref})")
    if _is_goal_env(env):
        print("We detected your env to be a GoalEnv because `env.compute_reward()` was defined.\n"
              "If it's not the case, please rename `env.compute_reward()` to something else to "
              "avoid False positives.")
        _require(isinstance(env.observation_space, spaces.Dict), "Goal conditioned envs "
                 "(previously gym.GoalEnv) require the observation space to be "
                 "gymnasium.spaces.Dict (rename `compute_reward()` if your env is not one)")


def _check_action_space(act_space: spaces.Space) -> None:
    if not isinstance(act_space, spaces.Box):
        return
    if (np.any(np.abs(act_space.low) != np.abs(act_space.high)) or np.any(act_space.low != -1)
            or np.any(act_space.high != 1)):
        _warn("We recommend you to use a symmetric and normalized Box action space "
              "(range=[-1, 1]) cf. https://stable-baselines3.readthedocs.io/en/master/guide/"
              "rl_tips.html")
    _require(np.all(np.isfinite(np.array([act_space.low, act_space.high]))),
             "Continuous action space must have a finite lower and upper bound")
    if act_space.dtype != np.dtype(np.float32):
        _warn(f"Your action space has dtype {act_space.dtype}, we recommend using np.float32 to "
              "avoid cast errors.")


def _check_nan(env: gym.Env) -> None:
    """NaN or inf in 10 random steps warn (VecCheckNan)."""
    vec_env = VecCheckNan(DummyVecEnv([lambda: env]), raise_exception=False)
    vec_env.reset()
    for _ in range(10):
        vec_env.step(np.array([env.action_space.sample()]))


def _check_render(env: gym.Env, warn: bool) -> None:
    if env.metadata.get("render_modes") is None and warn:
        _warn("No render modes was declared in the environment (env.metadata['render_modes'] is "
              "None or not defined), you may have trouble when calling `.render()`")
    if env.render_mode:
        env.render()
    env.close()


def check_env(env: gym.Env, warn: bool = True, skip_render_check: bool = True) -> None:
    """Check that ``env`` follows Gymnasium's API as SB3 (and rlgrad) need it; with ``warn``,
    also warn about what they do not support."""
    _require(isinstance(env, gym.Env), "Your environment must inherit from the gymnasium.Env "
             "class cf. https://gymnasium.farama.org/api/env/")
    _check_spaces(env)
    obs_space, act_space = env.observation_space, env.action_space
    try:
        env.reset(seed=0)
    except TypeError as e:
        raise TypeError(f"The reset() method must accept a `seed` parameter ({e})") from None
    skip = False
    if warn:
        skip = _check_unsupported_spaces(obs_space, act_space)
        subs = obs_space.spaces if isinstance(obs_space, spaces.Dict) else {"": obs_space}
        for key, sub in subs.items():
            if isinstance(sub, spaces.Box):
                if len(sub.shape) == 3:
                    _check_image_input(sub, key)
                if len(sub.shape) not in (1, 3):
                    _warn(f"Your observation {key} has an unconventional shape (neither an image, "
                          "nor a 1D vector): flatten it or use a custom policy.")
        _check_action_space(act_space)
    if skip:
        return
    _check_returned_values(env, obs_space, act_space)
    if not skip_render_check:
        _check_render(env, warn)
    try:
        check_for_nested_spaces(env.observation_space)
        _check_nan(env)
    except NotImplementedError:
        pass


__all__ = ["EnvCheckError", "check_env"]
