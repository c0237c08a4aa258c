"""Probability distributions with explicit gradient semantics (names and shapes as
``torch.distributions``).

* ``sample()``: a draw with no graph.  Gradients reach the parameters through ``log_prob(x)``
  (score-function / REINFORCE estimator, see ``rlgrad.estimators``).
* ``rsample()``: a reparameterized draw, differentiable w.r.t. the parameters (pathwise
  estimator); distributions without one (``has_rsample`` False) raise and name the alternatives.
* Draws come from ``rlgrad.random`` (``rlgrad.random.seed(n)``, or ``generator=`` per call).
* Arguments and values are validated (ValueError naming the argument) unless switched off with
  ``validate_args=False`` or ``Distribution.set_default_validate_args(False)``.
"""

from __future__ import annotations

from rlgrad.distributions import constraint_registry, constraints, transforms, utils
from rlgrad.distributions.beta import Beta
from rlgrad.distributions.categorical import Bernoulli, Categorical
from rlgrad.distributions.constraint_registry import biject_to, transform_to
from rlgrad.distributions.continuous import (
    Cauchy,
    Chi2,
    FisherSnedecor,
    Gumbel,
    HalfCauchy,
    HalfNormal,
    InverseGamma,
    Kumaraswamy,
    Pareto,
    StudentT,
    VonMises,
    Weibull,
)
from rlgrad.distributions.continuous_bernoulli import ContinuousBernoulli
from rlgrad.distributions.discrete import (
    Geometric,
    Multinomial,
    NegativeBinomial,
    OneHotCategoricalStraightThrough,
    RelaxedBernoulli,
)
from rlgrad.distributions.distribution import Distribution
from rlgrad.distributions.exponential_family import Binomial, Exponential, Laplace, LogNormal, Poisson
from rlgrad.distributions.gamma import Dirichlet, Gamma
from rlgrad.distributions.generalized_pareto import GeneralizedPareto
from rlgrad.distributions.kl import kl_divergence, register_kl
from rlgrad.distributions.lkj_cholesky import LKJCholesky
from rlgrad.distributions.lowrank import LogisticNormal, LowRankMultivariateNormal
from rlgrad.distributions.mixture import MixtureSameFamily
from rlgrad.distributions.mvn import MultivariateNormal
from rlgrad.distributions.normal import (
    DiagNormal,
    Independent,
    MultivariateNormalDiag,
    Normal,
    TanhNormal,
)
from rlgrad.distributions.onehot import OneHotCategorical
from rlgrad.distributions.relaxed import RelaxedOneHotCategorical
from rlgrad.distributions.sde import StateDependentNoiseDistribution
from rlgrad.distributions.transformed import TransformedDistribution
from rlgrad.distributions.transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CorrCholeskyTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    StackTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
)
from rlgrad.distributions.uniform import Uniform
from rlgrad.distributions.wishart import Wishart

__all__ = [
    "Distribution", "Categorical", "Bernoulli", "Normal", "Independent", "DiagNormal",
    "MultivariateNormalDiag", "TanhNormal", "Beta", "RelaxedOneHotCategorical", "kl_divergence",
    "register_kl", "constraints", "StateDependentNoiseDistribution", "TransformedDistribution",
    "transforms", "Transform", "AffineTransform", "ComposeTransform", "ExpTransform",
    "SigmoidTransform", "TanhTransform", "Uniform", "MultivariateNormal", "OneHotCategorical",
    "Gamma", "Dirichlet", "Laplace", "Exponential", "LogNormal", "Poisson", "Binomial",
    "MixtureSameFamily", "utils", "Cauchy", "Chi2", "FisherSnedecor", "Gumbel", "HalfCauchy",
    "HalfNormal", "InverseGamma", "Kumaraswamy", "Pareto", "StudentT", "Weibull",
    "VonMises", "Geometric", "Multinomial", "NegativeBinomial", "OneHotCategoricalStraightThrough",
    "RelaxedBernoulli", "LogisticNormal", "LowRankMultivariateNormal", "StickBreakingTransform",
    "ContinuousBernoulli", "AbsTransform", "CatTransform", "CorrCholeskyTransform",
    "CumulativeDistributionTransform", "IndependentTransform", "LowerCholeskyTransform",
    "PositiveDefiniteTransform", "PowerTransform", "ReshapeTransform", "SoftmaxTransform",
    "SoftplusTransform", "StackTransform", "biject_to", "transform_to", "constraint_registry",
    "GeneralizedPareto", "LKJCholesky", "Wishart",
]
