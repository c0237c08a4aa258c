"""SB3's ``BasePolicy`` methods on one network of an off-policy algorithm: ``model.actor`` (SB3's
``Actor``), ``model.q_net`` (SB3's ``QNetwork``, sb3-contrib's ``quantile_net``) predict, save
and load on their own, as SB3's do (``actor.predict(obs)``, ``actor.save(path)``,
``type(actor).load(path)``). The algorithm gives each network its spaces when it builds it
(``attach``); the network keeps them through ``deepcopy`` and ``save``."""

from __future__ import annotations

import os
import pickle
from typing import Any, TypeVar

import numpy as np
from gymnasium import spaces

from rlgrad import nn
from rlgrad.rl.policies import DeterministicActor, SquashedGaussianActor, mlp_numpy, predict_with

_Net = TypeVar("_Net", bound=nn.Module)

__all__ = ["NetworkPolicy", "QNetworkMLP", "QNetworkSequential", "SACActor", "TD3Actor", "attach"]


class NetworkPolicy:
    """The mixin: ``_actions(obs, deterministic)`` (preprocessed observations; a Box's actions
    in [-1, 1], as the network computes them) is the subclass's."""

    observation_space: spaces.Space
    action_space: spaces.Space
    squash_output = True  # SB3's actors squash with tanh: predict rescales onto the bounds

    def _actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        raise NotImplementedError

    def _spaces(self) -> tuple[spaces.Space, spaces.Space]:
        obs_space, act_space = (self.__dict__.get(k) for k in ("observation_space", "action_space"))
        if obs_space is None or act_space is None:
            raise AttributeError(f"{type(self).__name__}.predict: this network was not built by an "
                                 "algorithm (it has no observation/action space); use model.predict")
        if isinstance(obs_space, spaces.Dict):  # (the networks read the loop's flat rows)
            raise ValueError(f"{type(self).__name__}.predict: on Dict observations use "
                             "model.predict")
        return obs_space, act_space

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        """SB3's ``policy.predict``: actions in the action space (a Box's rescaled from [-1, 1]
        onto its bounds), the network in evaluation mode."""
        obs_space, act_space = self._spaces()
        self.set_training_mode(False)

        def act(x: np.ndarray) -> np.ndarray:
            a = self._actions(x, deterministic)
            if not isinstance(act_space, spaces.Box):
                return a
            low, high = act_space.low.reshape(-1), act_space.high.reshape(-1)
            a = low + 0.5 * (a.reshape(len(a), -1) + 1.0) * (high - low)
            return a.reshape(len(a), *act_space.shape).astype(act_space.dtype, copy=False)

        return predict_with(obs_space, observation, act)

    def set_training_mode(self, mode: bool) -> None:
        self.train(mode)  # type: ignore[attr-defined]  (an nn.Module's)

    def save(self, path: str | os.PathLike) -> None:
        """The network with its spaces, pickled (SB3's ``policy.save`` is a pickle too: load
        only files you trust), written to a temporary file renamed into place."""
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump({"network": self}, f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, device: Any = "auto") -> Any:
        """The network ``save`` wrote (a pickle: load only files you trust, as SB3's)."""
        with open(path, "rb") as f:
            saved = pickle.load(f)  # noqa: S301  (SB3's format is a pickle too)
        net = saved.get("network") if isinstance(saved, dict) else None
        if not isinstance(net, cls):
            raise ValueError(f"{os.fspath(path)} holds no {cls.__name__} (it holds "
                             f"{type(net if net is not None else saved).__name__})")
        return net


class SACActor(NetworkPolicy, SquashedGaussianActor):
    """SAC's (TQC's, CrossQ's) actor with SB3's ``Actor`` methods: deterministic is tanh(mu),
    else a sample of the squashed Gaussian (a new generator's draw, as torch's global one)."""

    def _actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return self.numpy(obs, None if deterministic else np.random.default_rng())


class TD3Actor(NetworkPolicy, DeterministicActor):
    """TD3's (DDPG's) actor with SB3's ``Actor`` methods: mu(s), whatever ``deterministic``."""

    def _actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return self.numpy(obs)


class _QNetworkPolicy(NetworkPolicy):
    """A Q-network's greedy action; with ``n_quantiles`` set, of the quantiles' mean per action
    (QR-DQN's output: (batch, n_actions * n_quantiles))."""

    n_quantiles: int | None = None

    @property
    def features_extractor(self) -> nn.Module | None:
        """SB3's ``q_net.features_extractor``: the extractor the layers start with (a user's
        ``features_extractor_class``, the CNN, the Dict's); None on vector observations, which
        the first Linear reads as they are (SB3's ``FlattenExtractor`` has no parameters)."""
        first = self[0]  # type: ignore[index]  (a Sequential)
        return None if isinstance(first, nn.Linear) else first

    def _actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        out = mlp_numpy(self, obs)  # type: ignore[arg-type]  (a Sequential)
        if self.n_quantiles is not None:
            out = out.reshape(len(obs), -1, self.n_quantiles).mean(axis=2)
        return out.argmax(axis=1)


class QNetworkMLP(_QNetworkPolicy, nn.MLP):
    """DQN's / QR-DQN's MLP with SB3's ``QNetwork`` methods (the same layers and keys)."""


class QNetworkSequential(_QNetworkPolicy, nn.Sequential):
    """DQN's / QR-DQN's network on images or Dicts with SB3's ``QNetwork`` methods."""


def attach(net: _Net, observation_space: spaces.Space, action_space: spaces.Space,
           n_quantiles: int | None = None) -> _Net:
    """``net`` with its spaces, so it predicts on its own; a Q-network's class becomes the one
    with the methods (the same layers and state-dict keys: only methods are added)."""
    if not isinstance(net, NetworkPolicy):
        if type(net) is nn.MLP:
            net.__class__ = QNetworkMLP
        elif type(net) is nn.Sequential:
            net.__class__ = QNetworkSequential
        else:
            return net  # a user's network: model.predict is the way
    net.observation_space = observation_space  # type: ignore[attr-defined]
    net.action_space = action_space  # type: ignore[attr-defined]
    if n_quantiles is not None:
        net.n_quantiles = int(n_quantiles)  # type: ignore[attr-defined]
    return net
