"""Gymnasium's classic-control tasks as functions of arrays (Gymnasium's ``FuncEnv`` interface).

Each class computes exactly what Gymnasium's own environment computes, step for step and bit for
bit (``tests/rl/test_functional_envs.py`` checks it against ``gym.make``): the same formulas in the
same order, written with ``rlgrad.numpy`` so that a loop over them can be traced (``rlgrad.jit``,
``rlgrad.lax``), and on arrays whose leading axes are a batch, so that one call steps many
copies. A state is an array ``(..., d)``; an action ``(...)`` (discrete) or ``(..., 1)``.

``initial`` draws from a NumPy ``Generator`` the way Gymnasium's ``reset`` draws from
``env.np_random``, so a copy seeded with ``s`` starts where ``gym.make(id).reset(seed=s)`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.experimental.functional import FuncEnv

import rlgrad.numpy as rnp

Array = Any  # a NumPy array, or rlgrad's traced array inside jit


def _column(state: Array, i: int) -> Array:
    return state[..., i]


class _StateObserved(FuncEnv):
    """A task whose observation is its state, in float32 (CartPole, the mountain cars)."""

    def observation(self, state: Array, rng: Any = None, params: Any = None) -> Array:
        return rnp.asarray(state, dtype=np.float32)


class _MountainCar(_StateObserved):
    """What both mountain cars share: the track, the speed limit, the flag."""

    min_position, max_position, max_speed, goal_velocity = -1.2, 0.6, 0.07, 0.0
    goal_position: float
    observation_space = spaces.Box(np.array([min_position, -max_speed], dtype=np.float32),
                                   np.array([max_position, max_speed], dtype=np.float32),
                                   dtype=np.float32)
    state_dim = 2

    def terminal(self, state: Array, rng: Any = None, params: Any = None) -> Array:
        return ((_column(state, 0) >= self.goal_position)
                & (_column(state, 1) >= self.goal_velocity))


class CartPoleFunctional(_StateObserved):
    """``CartPole-v1``: Euler integration of the cart-pole; reward 1 per step, the terminating
    one included; terminal when the cart leaves +-2.4 or the pole passes +-12 degrees."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart
    polemass_length = masspole * length
    theta_threshold_radians = 12 * 2 * np.pi / 360
    x_threshold = 2.4
    _high = np.array([x_threshold * 2, np.finfo(np.float32).max, theta_threshold_radians * 2,
                      np.finfo(np.float32).max], dtype=np.float32)
    observation_space = spaces.Box(-_high, _high, dtype=np.float32)
    action_space = spaces.Discrete(2)
    state_dim = 4

    def initial(self, rng: np.random.Generator, params: Any = None) -> np.ndarray:
        return rng.uniform(low=-0.05, high=0.05, size=(4,))

    def transition(self, state: Array, action: Array, rng: Any = None, params: Any = None) -> Array:
        x, x_dot, theta, theta_dot = (_column(state, i) for i in range(4))
        force = rnp.where(action == 1, self.force_mag, -self.force_mag)
        costheta, sintheta = rnp.cos(theta), rnp.sin(theta)
        temp = (force + self.polemass_length * rnp.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * rnp.square(costheta) / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        return rnp.stack([x + self.tau * x_dot, x_dot + self.tau * xacc,
                          theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc], axis=-1)

    def reward(self, state: Array, action: Array, next_state: Array, rng: Any = None,
               params: Any = None) -> Array:
        return rnp.ones_like(_column(next_state, 0))

    def terminal(self, state: Array, rng: Any = None, params: Any = None) -> Array:
        x, theta = _column(state, 0), _column(state, 2)
        return ((x < -self.x_threshold) | (x > self.x_threshold)
                | (theta < -self.theta_threshold_radians) | (theta > self.theta_threshold_radians))


class AcrobotFunctional(FuncEnv):
    """``Acrobot-v1``: the book's two-link dynamics, one RK4 step of ``dt`` per action; reward
    -1 per step, 0 on the terminating one; terminal when the tip rises above the bar."""

    dt = 0.2
    link_length_1 = link_mass_1 = link_mass_2 = link_moi = 1.0
    link_com_pos_1 = link_com_pos_2 = 0.5
    max_vel_1, max_vel_2 = 4 * np.pi, 9 * np.pi
    _high = np.array([1.0, 1.0, 1.0, 1.0, max_vel_1, max_vel_2], dtype=np.float32)
    observation_space = spaces.Box(-_high, _high, dtype=np.float32)
    action_space = spaces.Discrete(3)
    state_dim = 4

    def initial(self, rng: np.random.Generator, params: Any = None) -> np.ndarray:
        # Gymnasium keeps the first state in float32, then steps in float64
        first = rnp.asarray(rng.uniform(low=-0.1, high=0.1, size=(4,)), dtype=np.float32)
        return rnp.asarray(first, dtype=np.float64)

    def _derivatives(self, s: list[Array], torque: Array) -> list[Array]:
        """d(theta1, theta2, dtheta1, dtheta2)/dt, Gymnasium's ``_dsdt`` in its order of
        operations."""
        m1, m2, l1 = self.link_mass_1, self.link_mass_2, self.link_length_1
        lc1, lc2, i1, i2, g = self.link_com_pos_1, self.link_com_pos_2, self.link_moi, self.link_moi, 9.8
        theta1, theta2, dtheta1, dtheta2 = s
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * rnp.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * rnp.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * rnp.cos(theta1 + theta2 - np.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * rnp.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * rnp.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * rnp.cos(theta1 - np.pi / 2) + phi2)
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * rnp.sin(theta2)
                    - phi2) / (m2 * lc2**2 + i2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return [dtheta1, dtheta2, ddtheta1, ddtheta2]

    def _rk4(self, s: list[Array], torque: Array) -> list[Array]:
        dt, half = self.dt, self.dt / 2.0
        k1 = self._derivatives(s, torque)
        k2 = self._derivatives([a + half * b for a, b in zip(s, k1)], torque)
        k3 = self._derivatives([a + half * b for a, b in zip(s, k2)], torque)
        k4 = self._derivatives([a + dt * b for a, b in zip(s, k3)], torque)
        return [y + dt / 6.0 * (a + 2 * b + 2 * c + d)
                for y, a, b, c, d in zip(s, k1, k2, k3, k4)]

    @staticmethod
    def _wrap(x: Array) -> Array:
        """Gymnasium's ``wrap(x, -pi, pi)`` loop; two turns each way cover a step's largest
        change (9 pi * 0.2 < 2 pi) from a wrapped angle."""
        for _ in range(2):
            x = rnp.where(x > np.pi, x - 2 * np.pi, x)
        for _ in range(2):
            x = rnp.where(x < -np.pi, x + 2 * np.pi, x)
        return x

    def transition(self, state: Array, action: Array, rng: Any = None, params: Any = None) -> Array:
        torque = rnp.asarray(action - 1, dtype=np.float64)  # Gymnasium's [-1.0, 0.0, +1][action]
        t1, t2, v1, v2 = self._rk4([_column(state, i) for i in range(4)], torque)
        return rnp.stack([self._wrap(t1), self._wrap(t2),
                          rnp.clip(v1, -self.max_vel_1, self.max_vel_1),
                          rnp.clip(v2, -self.max_vel_2, self.max_vel_2)], axis=-1)

    def observation(self, state: Array, rng: Any = None, params: Any = None) -> Array:
        t1, t2 = _column(state, 0), _column(state, 1)
        return rnp.asarray(rnp.stack([rnp.cos(t1), rnp.sin(t1), rnp.cos(t2), rnp.sin(t2),
                                      _column(state, 2), _column(state, 3)], axis=-1),
                           dtype=np.float32)

    def reward(self, state: Array, action: Array, next_state: Array, rng: Any = None,
               params: Any = None) -> Array:
        return rnp.where(self.terminal(next_state), 0.0, -1.0)

    def terminal(self, state: Array, rng: Any = None, params: Any = None) -> Array:
        t1, t2 = _column(state, 0), _column(state, 1)
        return -rnp.cos(t1) - rnp.cos(t2 + t1) > 1.0


class MountainCarFunctional(_MountainCar):
    """``MountainCar-v0``: push left, none or right; reward -1 per step; terminal at the flag."""

    goal_position, force, gravity = 0.5, 0.001, 0.0025
    action_space = spaces.Discrete(3)

    def initial(self, rng: np.random.Generator, params: Any = None) -> np.ndarray:
        position = rng.uniform(low=-0.6, high=-0.4)  # (a batch of positions for a KeyBatch)
        return rnp.stack([position, rnp.zeros_like(position)], axis=-1)

    def transition(self, state: Array, action: Array, rng: Any = None, params: Any = None) -> Array:
        position, velocity = _column(state, 0), _column(state, 1)
        velocity = velocity + ((action - 1) * self.force + rnp.cos(3 * position) * (-self.gravity))
        velocity = rnp.clip(velocity, -self.max_speed, self.max_speed)
        position = rnp.clip(position + velocity, self.min_position, self.max_position)
        velocity = rnp.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        return rnp.stack([position, velocity], axis=-1)

    def reward(self, state: Array, action: Array, next_state: Array, rng: Any = None,
               params: Any = None) -> Array:
        return -rnp.ones_like(_column(next_state, 0))



class MountainCarContinuousFunctional(_MountainCar):
    """``MountainCarContinuous-v0``: a force in [-1, 1]; reward 100 at the flag minus 0.1 action^2.
    Gymnasium keeps this state in float32 and mixes it with Python floats, so the step follows
    NumPy's float32 rules where Gymnasium's does."""

    goal_position, power = 0.45, 0.0015
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def initial(self, rng: np.random.Generator, params: Any = None) -> np.ndarray:
        # float32, as Gymnasium's state is from the second step on (its first step, from the
        # float64 draw, differs from this one by float32 rounding)
        position = rng.uniform(low=-0.6, high=-0.4)
        return rnp.asarray(rnp.stack([position, rnp.zeros_like(position)], axis=-1),
                           dtype=np.float32)

    def transition(self, state: Array, action: Array, rng: Any = None, params: Any = None) -> Array:
        position, velocity = _column(state, 0), _column(state, 1)
        a = rnp.asarray(action, dtype=np.float32)[..., 0]
        slope = 0.0025 * rnp.cos(rnp.asarray(3 * position, dtype=np.float64))
        # Gymnasium's min(max(a, -1.0), 1.0) gives a Python float when it clips, and then the
        # change is computed in float64; else in float32 (NumPy's rule for a float32 and a float)
        pushed = rnp.clip(a, -1.0, 1.0) * self.power - rnp.asarray(slope, dtype=np.float32)
        clipped = rnp.sign(a) * self.power - slope
        change = rnp.where((a < -1.0) | (a > 1.0), clipped, pushed)
        velocity = velocity + rnp.asarray(change, dtype=velocity.dtype)
        velocity = rnp.clip(velocity, -self.max_speed, self.max_speed)
        position = rnp.clip(position + velocity, self.min_position, self.max_position)
        velocity = rnp.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        return rnp.asarray(rnp.stack([position, velocity], axis=-1), dtype=np.float32)

    def reward(self, state: Array, action: Array, next_state: Array, rng: Any = None,
               params: Any = None) -> Array:
        a = rnp.asarray(_column(action, 0), dtype=np.float64)
        return rnp.where(self.terminal(next_state), 100.0, 0.0) - a**2 * 0.1



class PendulumFunctional(FuncEnv):
    """``Pendulum-v1``: a torque in [-2, 2]; reward minus (angle^2 + 0.1 speed^2 + 0.001
    torque^2); never terminal (the time limit ends it)."""

    max_speed, max_torque, dt, g, m, length = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0
    _high = np.array([1.0, 1.0, max_speed], dtype=np.float32)
    observation_space = spaces.Box(-_high, _high, dtype=np.float32)
    action_space = spaces.Box(-max_torque, max_torque, shape=(1,), dtype=np.float32)
    state_dim = 2

    def initial(self, rng: np.random.Generator, params: Any = None) -> np.ndarray:
        high = np.array([np.pi, 1.0])
        return rng.uniform(low=-high, high=high)

    def _torque(self, action: Array) -> Array:
        return rnp.clip(rnp.asarray(action, dtype=np.float32), -self.max_torque,
                        self.max_torque)[..., 0]

    def transition(self, state: Array, action: Array, rng: Any = None, params: Any = None) -> Array:
        th, thdot, u = _column(state, 0), _column(state, 1), self._torque(action)
        g, m, length, dt = self.g, self.m, self.length, self.dt
        newthdot = thdot + (3 * g / (2 * length) * rnp.sin(th) + 3.0 / (m * length**2) * u) * dt
        newthdot = rnp.clip(newthdot, -self.max_speed, self.max_speed)
        return rnp.stack([th + newthdot * dt, newthdot], axis=-1)

    def observation(self, state: Array, rng: Any = None, params: Any = None) -> Array:
        th = _column(state, 0)
        return rnp.asarray(rnp.stack([rnp.cos(th), rnp.sin(th), _column(state, 1)], axis=-1),
                           dtype=np.float32)

    def reward(self, state: Array, action: Array, next_state: Array, rng: Any = None,
               params: Any = None) -> Array:
        th, thdot, u = _column(state, 0), _column(state, 1), self._torque(action)
        angle = ((th + np.pi) % (2 * np.pi)) - np.pi
        return -(angle**2 + 0.1 * thdot**2 + 0.001 * (u**2))

    def terminal(self, state: Array, rng: Any = None, params: Any = None) -> Array:
        return rnp.zeros_like(_column(state, 0), dtype=bool)
