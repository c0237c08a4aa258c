"""Issue 29's survey: call ~360 torch APIs that RL code (CleanRL, SB3, RLlib torch policies,
tianshou) uses, on torch and on rlgrad, and list those that raise on rlgrad only.

    python bench/torch_surface.py
"""
# ruff: noqa: F841, E731 - each table shares one set-up of tensors; entries are lambdas
import _timing  # noqa: F401 - first: the repository's rlgrad on the path
import numpy as np
import torch

import rlgrad


def _cases0(T):
    f = lambda *s: T.tensor(np.random.default_rng(0).normal(size=s).astype(np.float32))
    i = lambda *s: T.tensor(np.random.default_rng(1).integers(0, 4, s))
    F = T.nn.functional
    D = T.distributions
    nn = T.nn
    x, y, q, a = f(4, 5), f(4, 5), f(8, 4), i(8)
    v = f(6)
    return {
        "unique": lambda: T.unique(i(10)),
        "unique_inv_counts": lambda: T.unique(i(10), return_inverse=True, return_counts=True),
        "unique_dim": lambda: T.unique(i(6, 2), dim=0),
        "Tensor.unique": lambda: i(10).unique(sorted=True),
        "unique_consecutive": lambda: T.unique_consecutive(i(10)),
        "cummax": lambda: T.cummax(x, dim=1),
        "cummin": lambda: x.cummin(0),
        "bincount": lambda: T.bincount(i(10)),
        "bincount_w": lambda: T.bincount(i(10), weights=f(10), minlength=6),
        "index_fill": lambda: x.index_fill(1, T.tensor([0, 2]), -1.0),
        "index_fill_": lambda: x.clone().index_fill_(0, T.tensor([1]), 0.0),
        "take": lambda: T.take(x, T.tensor([0, 5, 19])),
        "take_along_dim": lambda: T.take_along_dim(q, a[:, None], dim=1),
        "Tensor.take_along_dim": lambda: q.take_along_dim(a[:, None], 1),
        "histc": lambda: T.histc(v, bins=4, min=-2, max=2),
        "searchsorted": lambda: T.searchsorted(T.tensor([0.0, 1.0, 2.0]), v),
        "searchsorted_right": lambda: T.searchsorted(T.tensor([0.0, 1.0, 2.0]), v, right=True),
        "bucketize": lambda: T.bucketize(v, T.tensor([0.0, 1.0])),
        "diff": lambda: T.diff(x, dim=1),
        "Tensor.diff": lambda: x.diff(n=2, dim=0),
        "tril_indices": lambda: T.tril_indices(3, 3),
        "triu_indices": lambda: T.triu_indices(3, 4, 1),
        "cartesian_prod": lambda: T.cartesian_prod(T.tensor([1, 2]), T.tensor([3, 4, 5])),
        "block_diag": lambda: T.block_diag(f(2, 2), f(1, 3)),
        "nan_to_num": lambda: T.nan_to_num(T.tensor([np.nan, np.inf, 1.0]), nan=0.0),
        "Tensor.nan_to_num": lambda: T.tensor([np.nan, 1.0]).nan_to_num(),
        "nan_to_num_": lambda: T.tensor([np.nan, 1.0]).nan_to_num_(),
        "logcumsumexp": lambda: T.logcumsumexp(x, dim=1),
        "Tensor.logcumsumexp": lambda: x.logcumsumexp(0),
        "count_nonzero": lambda: T.count_nonzero(x > 0, dim=1),
        "Tensor.count_nonzero": lambda: (x > 0).count_nonzero(),
        "aminmax": lambda: T.aminmax(x, dim=1),
        "Tensor.aminmax": lambda: x.aminmax(),
        "renorm": lambda: T.renorm(x, 2, 0, 1.0),
        "clamp_": lambda: x.clone().clamp_(min=0),
        "clamp_min": lambda: x.clamp_min(0.0),
        "clamp_min_": lambda: x.clone().clamp_min_(0.0),
        "clamp_max_": lambda: x.clone().clamp_max_(0.0),
        "clip_": lambda: x.clone().clip_(-1, 1),
        "new_zeros": lambda: x.new_zeros((2, 3)),
        "new_ones": lambda: x.new_ones(2, 3),
        "new_full": lambda: x.new_full((2,), 3.0),
        "new_empty": lambda: x.new_empty((2,)).shape,
        "new_tensor": lambda: x.new_tensor([1.0, 2.0]),
        "as_strided": lambda: T.as_strided(v, (2, 2), (1, 2)),
        "Tensor.as_strided": lambda: v.as_strided((3,), (2,)),
        "unfold": lambda: v.unfold(0, 2, 1),
        "gather": lambda: q.gather(1, a[:, None]),
        "index_select": lambda: x.index_select(1, T.tensor([0, 2])),
        "masked_select": lambda: T.masked_select(x, x > 0),
        "masked_scatter": lambda: x.masked_scatter(x > 0, T.zeros(20)),
        "nonzero": lambda: T.nonzero(x > 0),
        "nonzero_tuple": lambda: T.nonzero(x > 0, as_tuple=True),
        "argwhere": lambda: T.argwhere(x > 0),
        "where1": lambda: T.where(x > 0),
        "scatter_reduce": lambda: T.zeros(4).scatter_reduce(0, a[:4], f(4), reduce="amax"),
        "scatter_add": lambda: T.zeros(4).scatter_add(0, a[:4], f(4)),
        "index_add": lambda: T.zeros(4).index_add(0, a[:4], f(4)),
        "index_copy": lambda: T.zeros(4).index_copy(0, T.tensor([3, 0]), f(2)),
        "index_put_": lambda: T.zeros(4).index_put_((T.tensor([1, 2]),), T.tensor(1.0)),
        "index_put": lambda: T.zeros(4).index_put((T.tensor([1, 2]),), T.tensor([1.0, 2.0])),
        "put_": lambda: T.zeros(4).put_(T.tensor([1]), T.tensor([2.0])),
        "kthvalue": lambda: T.kthvalue(x, 2, dim=1),
        "mode": lambda: T.mode(i(5)),
        "nanmean": lambda: T.nanmean(x),
        "nansum": lambda: T.nansum(x),
        "nanmedian": lambda: T.nanmedian(x),
        "quantile": lambda: T.quantile(v, 0.3),
        "nanquantile": lambda: T.nanquantile(v, T.tensor([0.1, 0.9])),
        "std_mean": lambda: T.std_mean(x, dim=0),
        "var_mean": lambda: T.var_mean(x, dim=1, unbiased=False),
        "logaddexp": lambda: T.logaddexp(x, y),
        "logit": lambda: T.logit(T.sigmoid(x)),
    }


def _cases1(T):
    f = lambda *s: T.tensor(np.random.default_rng(0).normal(size=s).astype(np.float32))
    i = lambda *s: T.tensor(np.random.default_rng(1).integers(0, 4, s))
    F = T.nn.functional
    D = T.distributions
    nn = T.nn
    x, y, q, a = f(4, 5), f(4, 5), f(8, 4), i(8)
    v = f(6)
    return {
        "xlogy": lambda: T.xlogy(x.abs(), y.abs()),
        "special.xlogy": lambda: T.special.xlogy(x.abs(), y.abs()),
        "special.entr": lambda: T.special.entr(x.abs()),
        "special.logit": lambda: T.special.logit(T.sigmoid(x)),
        "special.expit": lambda: T.special.expit(x),
        "special.erfinv": lambda: T.special.erfinv(T.tanh(x)),
        "erfinv": lambda: T.erfinv(T.tanh(x)),
        "special.log_ndtr": lambda: T.special.log_ndtr(x),
        "special.ndtr": lambda: T.special.ndtr(x),
        "lgamma": lambda: T.lgamma(x.abs() + 1),
        "digamma": lambda: T.digamma(x.abs() + 1),
        "sign": lambda: x.sign(),
        "sgn": lambda: x.sgn(),
        "signbit": lambda: x.signbit(),
        "heaviside": lambda: T.heaviside(x, T.tensor(0.5)),
        "frac": lambda: x.frac(),
        "trunc": lambda: x.trunc(),
        "fix": lambda: x.fix(),
        "floor_divide": lambda: T.floor_divide(i(4), 3),
        "remainder": lambda: T.remainder(x, 1.5),
        "true_divide": lambda: T.true_divide(x, 2),
        "bitwise_and": lambda: T.bitwise_and(i(4), 1),
        "logical_xor": lambda: T.logical_xor(x > 0, y > 0),
        "bitwise_not": lambda: T.bitwise_not(x > 0),
        "any_dim": lambda: (x > 0).any(dim=1),
        "all_dim": lambda: (x > 0).all(1),
        "allclose": lambda: T.allclose(x, x),
        "isclose": lambda: T.isclose(x, y),
        "equal": lambda: T.equal(x, x),
        "maximum": lambda: T.maximum(x, y),
        "fmax": lambda: T.fmax(x, y),
        "hypot": lambda: T.hypot(x, y),
        "square": lambda: T.square(x),
        "rsqrt": lambda: x.abs().rsqrt(),
        "reciprocal": lambda: x.reciprocal(),
        "addmm": lambda: T.addmm(f(4, 4), x, f(5, 4)),
        "addmv": lambda: T.addmv(f(4), x, f(5)),
        "baddbmm": lambda: T.baddbmm(f(2, 3, 3), f(2, 3, 4), f(2, 4, 3)),
        "dot": lambda: T.dot(v, v),
        "vdot": lambda: T.vdot(v, v),
        "inner": lambda: T.inner(v, v),
        "kron": lambda: T.kron(f(2, 2), f(2, 2)),
        "cross": lambda: T.cross(f(2, 3), f(2, 3), dim=1),
        "cdist": lambda: T.cdist(f(3, 2), f(4, 2)),
        "tensordot": lambda: T.tensordot(x, y.T, dims=1),
        "cov": lambda: T.cov(x),
        "corrcoef": lambda: T.corrcoef(x),
        "linalg.vector_norm": lambda: T.linalg.vector_norm(x, dim=1),
        "linalg.matrix_norm": lambda: T.linalg.matrix_norm(f(3, 3)),
        "linalg.norm": lambda: T.linalg.norm(x),
        "logdet": lambda: T.logdet(f(3, 3) @ f(3, 3).T + T.eye(3)),
        "chain_matmul": lambda: T.linalg.multi_dot([x, y.T, x]),
        "movedim": lambda: T.movedim(f(2, 3, 4), 0, -1),
        "moveaxis": lambda: f(2, 3, 4).moveaxis(0, 2),
        "swapdims": lambda: x.swapdims(0, 1),
        "permute": lambda: f(2, 3, 4).permute(2, 0, 1),
        "unflatten": lambda: v.unflatten(0, (2, 3)),
        "flatten": lambda: f(2, 3, 4).flatten(1),
        "hstack": lambda: T.hstack([x, y]),
        "vstack": lambda: T.vstack([x, y]),
        "dstack": lambda: T.dstack([x, y]),
        "column_stack": lambda: T.column_stack([v, v]),
        "row_stack": lambda: T.row_stack([v, v]),
        "atleast_2d": lambda: T.atleast_2d(v),
        "tensor_split": lambda: T.tensor_split(v, 3),
        "hsplit": lambda: T.hsplit(x, [2]),
        "vsplit": lambda: T.vsplit(x, 2),
        "split_sizes": lambda: x.split([1, 3]),
        "rot90": lambda: T.rot90(x),
        "fliplr": lambda: T.fliplr(x),
        "roll": lambda: T.roll(x, 1, 0),
        "expand_as": lambda: v[:1].expand_as(v),
        "view_as": lambda: x.view_as(y),
    }


def _cases2(T):
    f = lambda *s: T.tensor(np.random.default_rng(0).normal(size=s).astype(np.float32))
    i = lambda *s: T.tensor(np.random.default_rng(1).integers(0, 4, s))
    F = T.nn.functional
    D = T.distributions
    nn = T.nn
    x, y, q, a = f(4, 5), f(4, 5), f(8, 4), i(8)
    v = f(6)
    return {
        "reshape_as": lambda: x.reshape_as(y),
        "type_as": lambda: i(3).type_as(x),
        "contiguous": lambda: x.contiguous(),
        "is_contiguous": lambda: x.is_contiguous(),
        "stride": lambda: x.stride(),
        "storage_offset": lambda: x.storage_offset(),
        "element_size": lambda: x.element_size(),
        "nelement": lambda: x.nelement(),
        "numel": lambda: T.numel(x),
        "dim": lambda: x.dim(),
        "ndimension": lambda: x.ndimension(),
        "is_floating_point": lambda: T.is_floating_point(x),
        "is_tensor": lambda: T.is_tensor(x),
        "full_like": lambda: T.full_like(x, 2.0),
        "empty_like": lambda: T.empty_like(x).shape,
        "zeros_like_dtype": lambda: T.zeros_like(x, dtype=T.int64),
        "arange_float": lambda: T.arange(0, 1, 0.25),
        "logspace": lambda: T.logspace(0, 2, steps=3),
        "eye_nm": lambda: T.eye(2, 3),
        "randint_like": lambda: T.randint_like(x, 5).shape,
        "rand_like": lambda: T.rand_like(x).shape,
        "normal_tensor": lambda: T.normal(x, 1.0).shape,
        "bernoulli_": lambda: x.clone().bernoulli_(0.5).shape,
        "exponential_": lambda: x.clone().exponential_().shape,
        "random_": lambda: x.clone().random_(0, 5).shape,
        "geometric_": lambda: x.clone().geometric_(0.5).shape,
        "log_normal_": lambda: x.clone().log_normal_().shape,
        "cauchy_": lambda: x.clone().cauchy_().shape,
        "poisson": lambda: T.poisson(x.abs()).shape,
        "multinomial": lambda: T.multinomial(x.abs(), 2).shape,
        "F.gumbel_softmax": lambda: F.gumbel_softmax(x, tau=1.0, hard=True).shape,
        "F.softplus_beta": lambda: F.softplus(x, beta=2.0),
        "F.log_softmax": lambda: F.log_softmax(x, dim=-1),
        "F.softmin": lambda: F.softmin(x, dim=1),
        "F.hardtanh": lambda: F.hardtanh(x),
        "F.relu6": lambda: F.relu6(x),
        "F.hardswish": lambda: F.hardswish(x),
        "F.selu": lambda: F.selu(x),
        "F.celu": lambda: F.celu(x),
        "F.glu": lambda: F.glu(f(4, 6)),
        "F.logsigmoid": lambda: F.logsigmoid(x),
        "F.softsign": lambda: F.softsign(x),
        "F.tanhshrink": lambda: F.tanhshrink(x),
        "F.threshold": lambda: F.threshold(x, 0.1, 0.0),
        "F.smooth_l1_loss": lambda: F.smooth_l1_loss(x, y, beta=0.5),
        "F.l1_loss": lambda: F.l1_loss(x, y),
        "F.nll_loss": lambda: F.nll_loss(F.log_softmax(q, 1), a),
        "F.cross_entropy_probs": lambda: F.cross_entropy(q, F.softmax(q, 1)),
        "F.cosine_similarity": lambda: F.cosine_similarity(x, y),
        "F.pairwise_distance": lambda: F.pairwise_distance(x, y),
        "F.layer_norm": lambda: F.layer_norm(x, (5,)),
        "F.one_hot": lambda: F.one_hot(a, 4),
        "F.embedding": lambda: F.embedding(a, f(4, 3)),
        "F.max_pool2d": lambda: F.max_pool2d(f(1, 1, 4, 4), 2),
        "F.avg_pool2d": lambda: F.avg_pool2d(f(1, 1, 4, 4), 2),
        "F.adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(f(1, 1, 4, 4), 1),
        "F.interpolate": lambda: F.interpolate(f(1, 1, 2, 2), scale_factor=2),
        "F.conv1d": lambda: F.conv1d(f(1, 2, 6), f(3, 2, 3)),
        "F.conv_transpose2d": lambda: F.conv_transpose2d(f(1, 2, 3, 3), f(2, 1, 2, 2)),
        "F.huber_loss": lambda: F.huber_loss(x, y, delta=0.5),
        "F.poisson_nll_loss": lambda: F.poisson_nll_loss(x, y.abs()),
        "F.gaussian_nll_loss": lambda: F.gaussian_nll_loss(x, y, x.abs() + 0.1),
        "F.margin_ranking_loss": lambda: F.margin_ranking_loss(v, v.flip(0), T.ones(6)),
        "nn.Conv1d": lambda: nn.Conv1d(2, 3, 3)(f(1, 2, 6)).shape,
        "nn.MaxPool2d": lambda: nn.MaxPool2d(2)(f(1, 1, 4, 4)).shape,
        "nn.AdaptiveAvgPool2d": lambda: nn.AdaptiveAvgPool2d((1, 1))(f(1, 1, 4, 4)).shape,
        "nn.ConvTranspose2d": lambda: nn.ConvTranspose2d(2, 1, 2)(f(1, 2, 3, 3)).shape,
        "nn.Unflatten": lambda: nn.Unflatten(1, (1, 5))(x).shape,
        "nn.Identity": lambda: nn.Identity()(x).shape,
        "nn.ModuleDict": lambda: len(nn.ModuleDict({"a": nn.Linear(2, 2)})),
        "nn.ParameterList": lambda: len(nn.ParameterList([nn.Parameter(f(2))])),
        "nn.LayerNorm": lambda: nn.LayerNorm(5)(x).shape,
        "nn.GroupNorm": lambda: nn.GroupNorm(1, 2)(f(1, 2, 3)).shape,
    }


def _cases3(T):
    f = lambda *s: T.tensor(np.random.default_rng(0).normal(size=s).astype(np.float32))
    i = lambda *s: T.tensor(np.random.default_rng(1).integers(0, 4, s))
    F = T.nn.functional
    D = T.distributions
    nn = T.nn
    x, y, q, a = f(4, 5), f(4, 5), f(8, 4), i(8)
    v = f(6)
    return {
        "nn.Softplus": lambda: nn.Softplus()(x).shape,
        "nn.PReLU": lambda: nn.PReLU()(x).shape,
        "nn.Hardswish": lambda: nn.Hardswish()(x).shape,
        "nn.SmoothL1Loss": lambda: nn.SmoothL1Loss()(x, y),
        "nn.utils.clip_grad_value_": lambda: nn.utils.clip_grad_value_([nn.Parameter(f(2))], 1.0),
        "nn.init.orthogonal_": lambda: nn.init.orthogonal_(T.empty(3, 3)).shape,
        "nn.init.constant_": lambda: nn.init.constant_(T.empty(3), 0.0),
        "distributions.Bernoulli": lambda: T.distributions.Bernoulli(logits=v).log_prob(T.ones(6)),
        "distributions.Beta": lambda: T.distributions.Beta(T.ones(2), T.ones(2)).entropy(),
        "distributions.Independent": lambda: D.Independent(D.Normal(x, 1.0), 1).log_prob(y),
        "distributions.kl_divergence": lambda: D.kl_divergence(D.Categorical(logits=q),
                                                               D.Categorical(logits=q)),
        "distributions.Laplace": lambda: T.distributions.Laplace(v, 1.0).log_prob(v),
        "distributions.Exponential": lambda: T.distributions.Exponential(v.abs()).log_prob(v.abs()),
        "distributions.Poisson": lambda: T.distributions.Poisson(v.abs()).log_prob(T.ones(6)),
        "distributions.Binomial": lambda: T.distributions.Binomial(3, probs=T.sigmoid(v)).log_prob(T.ones(6)),
        "distributions.LogNormal": lambda: T.distributions.LogNormal(v, 1.0).log_prob(v.abs()),
        "distributions.RelaxedOneHotCategorical": lambda: D.RelaxedOneHotCategorical(
            T.tensor(0.5), logits=q).rsample().shape,
        "distributions.Categorical.enumerate_support": lambda: D.Categorical(
            logits=q).enumerate_support().shape,
        "distributions.Normal.entropy": lambda: T.distributions.Normal(v, 1.0).entropy(),
        "distributions.MixtureSameFamily": lambda: D.MixtureSameFamily(
            D.Categorical(logits=v), D.Normal(v, T.ones(6))).log_prob(T.tensor(0.1)),
        "distributions.constraints": lambda: T.distributions.constraints.real,
        "autograd.functional.jacobian": lambda: T.autograd.functional.jacobian(lambda z: z ** 2, v),
        "set_grad_enabled": lambda: T.set_grad_enabled(False).__class__,
        "is_grad_enabled": lambda: T.is_grad_enabled(),
        "get_default_dtype": lambda: T.get_default_dtype(),
        "set_printoptions": lambda: T.set_printoptions(precision=4),
        "from_numpy": lambda: T.from_numpy(np.ones(3)),
        "as_tensor": lambda: T.as_tensor([1, 2]),
        "Tensor.tolist": lambda: x.tolist(),
        "Tensor.to_dtype": lambda: x.to(T.float64),
        "Tensor.double": lambda: x.double(),
        "Tensor.half": lambda: x.half(),
        "Tensor.bool": lambda: x.bool(),
        "Tensor.long": lambda: x.long(),
        "Tensor.byte": lambda: x.byte(),
        "Tensor.cpu": lambda: x.cpu(),
        "Tensor.pin_memory_absent": lambda: x.share_memory_(),
        "Tensor.requires_grad_": lambda: x.clone().requires_grad_(),
        "Tensor.argmax_keepdim": lambda: x.argmax(dim=1, keepdim=True),
        "Tensor.max_other": lambda: x.max(y),
        "Tensor.sum_dims": lambda: x.sum((0, 1)),
        "Tensor.prod_dim": lambda: x.prod(1),
        "Tensor.logsumexp": lambda: x.logsumexp(1),
        "Tensor.std_unbiased": lambda: x.std(1, unbiased=False),
        "Tensor.var_correction": lambda: x.var(1, correction=0),
        "Tensor.expm1": lambda: x.expm1(),
        "Tensor.log1p": lambda: x.abs().log1p(),
        "Tensor.sigmoid_": lambda: x.clone().sigmoid_(),
        "Tensor.relu_": lambda: x.clone().relu_(),
        "Tensor.tanh_": lambda: x.clone().tanh_(),
        "Tensor.exp_": lambda: x.clone().exp_(),
        "Tensor.abs_": lambda: x.clone().abs_(),
        "Tensor.neg_": lambda: x.clone().neg_(),
        "Tensor.pow_": lambda: x.clone().pow_(2),
        "Tensor.sqrt_": lambda: x.abs().sqrt_(),
        "Tensor.floor_": lambda: x.clone().floor_(),
        "Tensor.round_decimals": lambda: x.round(decimals=2),
        "Tensor.masked_fill_bool": lambda: x.masked_fill(x > 0, float("-inf")),
        "Tensor.squeeze_dims": lambda: f(1, 2, 1).squeeze((0, 2)),
        "Tensor.unsqueeze_": lambda: x.clone().unsqueeze_(0),
        "Tensor.t_": lambda: x.clone().t_(),
        "Tensor.mT": lambda: f(2, 3, 4).mT,
        "Tensor.H": lambda: x.H if hasattr(x, "H") else x.mH,
        "Tensor.T": lambda: x.T,
        "Tensor.addmm_": lambda: f(4, 4).addmm_(x, f(5, 4)),
        "Tensor.copysign": lambda: x.copysign(y),
        "Tensor.lerp_": lambda: x.clone().lerp_(y, 0.5),
        "Tensor.sort_stable": lambda: x.sort(dim=1, descending=True, stable=True),
        "Tensor.argsort_desc": lambda: x.argsort(dim=1, descending=True),
        "Tensor.msort": lambda: x.msort(),
        "Tensor.cumsum_": lambda: x.clone().cumsum_(1),
        "Tensor.index_add_alpha": lambda: T.zeros(4).index_add_(0, a[:4], f(4), alpha=2.0),
        "Tensor.scatter_value": lambda: T.zeros(2, 4).scatter_(1, a[:2, None], 1.0),
    }


def _cases4(T):
    f = lambda *s: T.tensor(np.random.default_rng(0).normal(size=s).astype(np.float32))
    i = lambda *s: T.tensor(np.random.default_rng(1).integers(0, 4, s))
    F = T.nn.functional
    D = T.distributions
    nn = T.nn
    x, y, q, a = f(4, 5), f(4, 5), f(8, 4), i(8)
    v = f(6)
    return {
        "Tensor.scatter_reduce_": lambda: T.zeros(4).scatter_reduce_(0, a[:4], f(4), reduce="sum"),
        "Tensor.scatter_add_": lambda: T.zeros(4).scatter_add_(0, a[:4], f(4)),
        "Tensor.masked_scatter_": lambda: x.clone().masked_scatter_(x > 0, T.zeros(20)),
        "Tensor.all": lambda: x.all(),
        "Tensor.softmax": lambda: x.softmax(-1),
        "Tensor.log_softmax": lambda: x.log_softmax(dim=1),
        "Tensor.expand_neg": lambda: v[None].expand(3, -1),
        "Tensor.repeat": lambda: v.repeat(2, 1),
        "Tensor.numpy_force": lambda: x.numpy(force=True),
        "Tensor.detach_": lambda: x.clone().detach_(),
        "Tensor.sum_to_size": lambda: x.sum_to_size(1, 5),
        "Tensor.resize_": lambda: x.clone().resize_(20),
        "Tensor.is_leaf": lambda: x.is_leaf,
        "Tensor.grad_fn": lambda: x.grad_fn,
        "Tensor.device": lambda: str(x.device),
        "Tensor.is_cuda": lambda: x.is_cuda,
        "Tensor.data_ptr": lambda: x.data_ptr() > 0,
        "Tensor.apply_": lambda: x.clone().apply_(lambda z: z * 2),
        "Tensor.map_": lambda: x.clone().map_(y, lambda p, q: p + q),
        "Tensor.float_power": lambda: x.abs().float_power(2),
        "Tensor.pow_tensor": lambda: T.pow(2.0, x),
        "Tensor.bitwise_left_shift": lambda: i(3) << 1,
        "Tensor.__invert__": lambda: ~(x > 0),
        "Tensor.__xor__": lambda: (x > 0) ^ (y > 0),
        "Tensor.__rpow__": lambda: 2 ** x,
        "Tensor.__matmul__1d": lambda: v @ v,
        "Tensor.__floordiv__": lambda: x // 2,
        "Tensor.__mod__": lambda: x % 2,
        "Tensor.__abs__": lambda: abs(x),
        "Tensor.__len__": lambda: len(x),
        "Tensor.__iter__": lambda: [r.shape for r in x],
        "Tensor.__contains__": lambda: 2 in i(5),
        "Tensor.__hash__": lambda: hash(x) is not None,
        "Tensor.__format__": lambda: f"{x.sum():.3f}",
        "Tensor.__index__": lambda: [1, 2, 3][T.tensor(1)],
        "utils.data.random_split": lambda: len(T.utils.data.random_split(range(10), [5, 5])),
        "distributions.utils.logits_to_probs": lambda: T.distributions.utils.logits_to_probs(v),
        "nn.functional.normalize": lambda: F.normalize(x, dim=1),
        "backends.cudnn": lambda: T.backends.cudnn.deterministic,
        "use_deterministic_algorithms": lambda: T.use_deterministic_algorithms(False),
        "set_num_threads": lambda: T.set_num_threads(1),
        "get_num_threads": lambda: T.get_num_threads() > 0,
        "save_load": lambda: T.save({"a": x}, "/tmp/vmapidx/x.pt"),
        "finfo": lambda: T.finfo(T.float32).eps,
        "iinfo": lambda: T.iinfo(T.int64).max,
        "distributions.Normal.rsample": lambda: T.distributions.Normal(x, 1.0).rsample().shape,
        "signal_window": lambda: T.hann_window(4),
        "stft_absent": lambda: T.fft.rfft(v),
        "clamp_tensor_bounds": lambda: T.clamp(x, min=T.zeros(5), max=T.ones(5)),
        "amax_dims": lambda: T.amax(x, dim=(0, 1)),
        "Tensor.max_all": lambda: x.max(),
        "min_dim_keep": lambda: T.min(x, 1, keepdim=True),
        "topk_largest_false": lambda: T.topk(v, 2, largest=False),
        "sort_values_indices": lambda: T.sort(v).values,
        "max_named": lambda: T.max(x, dim=1).indices,
        "ge_scalar": lambda: T.ge(x, 0),
        "greater": lambda: T.greater(x, y),
        "not_equal": lambda: T.not_equal(x, y),
        "broadcast_tensors": lambda: T.broadcast_tensors(x, v[:5]),
        "broadcast_shapes": lambda: T.broadcast_shapes((4, 1), (1, 5)),
        "meshgrid": lambda: T.meshgrid(v, v, indexing="ij"),
        "combinations": lambda: T.combinations(T.tensor([1, 2, 3]), 2),
        "stack_dim": lambda: T.stack([x, y], dim=-1),
        "cat_neg": lambda: T.cat([x, y], -1),
        "concat": lambda: T.concat([x, y]),
        "squeeze_all": lambda: T.squeeze(f(1, 3, 1)),
        "gather_neg": lambda: T.gather(q, -1, a[:, None]),
        "einsum_list": lambda: T.einsum("ij,jk->ik", [x, y.T]),
        "no_grad_deco": lambda: T.no_grad()(lambda: 1)(),
        "autocast_absent": lambda: T.autocast("cpu", enabled=False).__class__,
    }


def _cases5(T):
    """The distributions, optimizers, schedulers, linalg and Bessel functions of the session
    that closed issue 29's list."""
    f = lambda *s: T.tensor(np.random.default_rng(0).normal(size=s))
    D, optim, sched = T.distributions, T.optim, T.optim.lr_scheduler
    x, v, m = f(4, 5), f(6).abs() + 0.5, f(4, 4)
    p = T.sigmoid(f(6))
    w = T.nn.Parameter(f(3))
    opt = lambda: optim.SGD([T.nn.Parameter(f(2))], lr=0.1, momentum=0.9)
    closure = lambda o: (o.zero_grad(), (l := (w ** 2).sum()).backward(), l)[2]
    lbfgs = lambda: optim.LBFGS([w], line_search_fn="strong_wolfe")
    return {
        "distributions.Cauchy": lambda: D.Cauchy(v, v).rsample((2,)),
        "distributions.HalfCauchy": lambda: D.HalfCauchy(v).log_prob(v),
        "distributions.HalfNormal": lambda: D.HalfNormal(v).entropy(),
        "distributions.Gumbel": lambda: D.Gumbel(v, v).rsample(),
        "distributions.Weibull": lambda: D.Weibull(v, v).log_prob(v),
        "distributions.Pareto": lambda: D.Pareto(v, v).log_prob(v + 1),
        "distributions.Kumaraswamy": lambda: D.Kumaraswamy(v, v).rsample(),
        "distributions.StudentT": lambda: D.StudentT(v).log_prob(v),
        "distributions.Chi2": lambda: D.Chi2(v).log_prob(v),
        "distributions.InverseGamma": lambda: D.InverseGamma(v, v).entropy(),
        "distributions.FisherSnedecor": lambda: D.FisherSnedecor(v, v).log_prob(v),
        "distributions.VonMises": lambda: D.VonMises(v, v).log_prob(v),
        "distributions.Geometric": lambda: D.Geometric(p).log_prob(T.ones(6)),
        "distributions.NegativeBinomial": lambda: D.NegativeBinomial(v, p).log_prob(T.ones(6)),
        "distributions.Multinomial": lambda: D.Multinomial(3, probs=T.softmax(x, -1)).sample(),
        "distributions.RelaxedBernoulli": lambda: D.RelaxedBernoulli(T.tensor(0.5), probs=p).rsample(),
        "distributions.OneHotCategoricalStraightThrough": lambda: D.OneHotCategoricalStraightThrough(
            logits=x).rsample(),
        "distributions.LowRankMultivariateNormal": lambda: D.LowRankMultivariateNormal(
            x[:, :3], f(4, 3, 2), v[:3]).log_prob(x[:, :3]),
        "distributions.LogisticNormal": lambda: D.LogisticNormal(x, v[:5]).rsample(),
        "distributions.StickBreakingTransform": lambda: D.StickBreakingTransform()(x),
        "distributions.ContinuousBernoulli": lambda: D.ContinuousBernoulli(p).rsample(),
        "optim.Rprop": lambda: optim.Rprop([T.nn.Parameter(f(2))]).defaults,
        "optim.ASGD": lambda: optim.ASGD([T.nn.Parameter(f(2))]).defaults,
        "optim.LBFGS": lambda: (o := lbfgs()).step(lambda: closure(o)),
        "optim.lr_scheduler.CyclicLR": lambda: sched.CyclicLR(opt(), 0.01, 0.1).get_last_lr(),
        "optim.lr_scheduler.ChainedScheduler": lambda: sched.ChainedScheduler(
            [sched.ExponentialLR(o := opt(), 0.9), sched.StepLR(o, 2)]).step(),
        "linalg.lu": lambda: T.linalg.lu(m).L,
        "linalg.lu_factor": lambda: T.linalg.lu_factor(m).pivots,
        "linalg.lu_factor_ex": lambda: T.linalg.lu_factor_ex(m).info,
        "linalg.lu_solve": lambda: T.linalg.lu_solve(*T.linalg.lu_factor(m), x[:, :2]),
        "linalg.eig": lambda: T.linalg.eig(m).eigenvalues,
        "linalg.eigvals": lambda: T.linalg.eigvals(m),
        "linalg.cond": lambda: T.linalg.cond(m),
        "linalg.matrix_rank": lambda: T.linalg.matrix_rank(m),
        "linalg.vander": lambda: T.linalg.vander(v),
        "i0": lambda: T.i0(v),
        "Tensor.i0": lambda: v.i0(),
        "special.i0e": lambda: T.special.i0e(v),
        "special.i1": lambda: T.special.i1(v),
        "special.i1e": lambda: T.special.i1e(v),
        "special.modified_bessel_i0": lambda: T.special.modified_bessel_i0(v),
    }


def _adafactor_step(T, init):
    with T.enable_grad():
        w = T.nn.Parameter(init)
        opt = T.optim.Adafactor([w])
        (w ** 2).sum().backward()
        opt.step()
    return w


def _cases6(T):
    """Issue 29's last list: transforms, constraints, GeneralizedPareto, LKJCholesky, the
    incomplete gamma function, linalg's _ex and LDL forms, Adafactor and SparseAdam."""
    f = lambda *s: T.tensor(np.random.default_rng(0).normal(size=s))
    D, tr, C, optim = T.distributions, T.distributions.transforms, T.distributions.constraints, T.optim
    x, v, m = f(4, 6), f(6).abs() + 0.5, f(4, 4)
    spd = m @ m.mT + 4 * T.eye(4, dtype=m.dtype)
    sym = m + m.mT
    fit = lambda t, z: t.log_abs_det_jacobian(z, t(z))
    return {
        "distributions.transforms.PowerTransform": lambda: fit(tr.PowerTransform(2.0), v),
        "distributions.transforms.AbsTransform": lambda: tr.AbsTransform()(x),
        "distributions.transforms.SoftmaxTransform": lambda: tr.SoftmaxTransform()(x),
        "distributions.transforms.SoftplusTransform": lambda: fit(tr.SoftplusTransform(), x),
        "distributions.transforms.IndependentTransform": lambda: fit(
            tr.IndependentTransform(tr.ExpTransform(), 1), x),
        "distributions.transforms.ReshapeTransform": lambda: tr.ReshapeTransform((6,), (2, 3))(x),
        "distributions.transforms.CatTransform": lambda: fit(
            tr.CatTransform([tr.ExpTransform(), tr.SigmoidTransform()], 1, [2, 4]), x),
        "distributions.transforms.StackTransform": lambda: fit(
            tr.StackTransform([tr.ExpTransform()] * 4, 0), x),
        "distributions.transforms.CorrCholeskyTransform": lambda: fit(tr.CorrCholeskyTransform(), x),
        "distributions.transforms.LowerCholeskyTransform": lambda: tr.LowerCholeskyTransform()(m),
        "distributions.transforms.PositiveDefiniteTransform": lambda: tr.PositiveDefiniteTransform()(m),
        "distributions.transforms.CumulativeDistributionTransform": lambda: fit(
            tr.CumulativeDistributionTransform(D.Normal(0.0, 1.0)), x.float()),
        "distributions.biject_to": lambda: D.biject_to(C.interval(-1.0, 2.0))(x),
        "distributions.transform_to": lambda: D.transform_to(C.simplex)(x),
        "distributions.constraints.corr_cholesky": lambda: C.corr_cholesky.event_dim,
        "distributions.constraints.greater_than": lambda: C.greater_than(1.0).lower_bound,
        "distributions.GeneralizedPareto": lambda: D.GeneralizedPareto(
            v.float(), v.float(), v.float()).log_prob(v.float() + 1),
        "distributions.LKJCholesky": lambda: D.LKJCholesky(3, 2.0).log_prob(D.LKJCholesky(3, 2.0).sample()),
        "distributions.Gamma.cdf": lambda: D.Gamma(v, v).cdf(v),
        "distributions.Chi2.cdf": lambda: D.Chi2(v).cdf(v),
        "distributions.InverseGamma.cdf": lambda: D.InverseGamma(v, v).cdf(v),
        "special.gammainc": lambda: T.special.gammainc(v, v),
        "special.gammaincc": lambda: T.special.gammaincc(v, v),
        "linalg.inv_ex": lambda: T.linalg.inv_ex(m).info,
        "linalg.solve_ex": lambda: T.linalg.solve_ex(m, x[:, :2]).result,
        "linalg.cholesky_ex": lambda: T.linalg.cholesky_ex(spd).L,
        "linalg.ldl_factor": lambda: T.linalg.ldl_factor(sym).pivots,
        "linalg.ldl_factor_ex": lambda: T.linalg.ldl_factor_ex(sym).info,
        "linalg.ldl_solve": lambda: T.linalg.ldl_solve(*T.linalg.ldl_factor(sym), x[:, :2]),
        "optim.Adafactor": lambda: _adafactor_step(T, f(3, 2)),
        "optim.SparseAdam": lambda: optim.SparseAdam([T.nn.Parameter(f(2))]).defaults,
    }


def cases(T):
    out = {}
    for part in (_cases0, _cases1, _cases2, _cases3, _cases4, _cases5, _cases6):
        out.update(part(T))
    return out

def run(mod):
    out = {}
    for k, fn in cases(mod).items():
        try:
            fn()
            out[k] = None
        except Exception as e:  # noqa: BLE001
            out[k] = f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
    return out

tt = run(torch)
rr = run(rlgrad)
print(len(tt), "APIs")
n = 0
for k in tt:
    if rr[k] and not tt[k]:
        n += 1
        print(f"FAIL {k}: {rr[k]}")
    elif tt[k]:
        print(f"(torch fails {k}: {tt[k]})")
print(n, "fail on rlgrad")
