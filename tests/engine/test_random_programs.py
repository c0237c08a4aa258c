"""Random programs: compositions of the engine's operations on random shapes with broadcasting,
their gradients checked against central finite differences in float64 at first and second order,
and the compiled step (``rlgrad.jit``) checked against eager execution on fresh inputs.

The programs and their drawing are tests/helpers/programs.py's (``RLGRAD_RANDOM_PROGRAMS`` raises
their number for a deep run).
"""

from __future__ import annotations

import numpy as np
from helpers.programs import EXAMPLES, SETTINGS, draw_program
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlgrad


@SETTINGS
@given(st.data())
def test_random_programs_match_finite_differences_to_second_order(data):
    program = draw_program(data)
    rlgrad.check_grads(program, order=2, rtol=1e-5, atol=1e-6)(*program.inputs)


@SETTINGS
@given(st.data())
def test_random_programs_compiled_equal_eager_on_fresh_inputs(data):
    program = draw_program(data)
    argnums = tuple(range(len(program.inputs)))
    eager = rlgrad.value_and_grad(program, argnums=argnums)
    compiled = rlgrad.jit(eager)
    rng = np.random.default_rng(len(program.steps))
    for xs in (program.inputs, [rng.uniform(-1.5, 1.5, x.shape) for x in program.inputs]):
        with np.errstate(all="ignore"):
            v, g = eager(*xs)
            cv, cg = compiled(*xs)
        scale = max(1.0, float(np.max(np.abs(v))))
        np.testing.assert_allclose(cv, v, rtol=1e-10, atol=1e-12 * scale)
        for a, b in zip(cg, g):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10 * max(1.0, np.max(np.abs(b))))


@settings(max_examples=max(EXAMPLES // 5, 10), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large])
@given(st.data())
def test_random_programs_match_finite_differences_at_third_order(data):
    program = draw_program(data)
    rlgrad.check_grads(program, order=3, rtol=1e-4, atol=1e-5)(*program.inputs)
