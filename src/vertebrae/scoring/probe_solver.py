"""The exact solver behind LinearProbeMetric: scikit-learn's standardized logistic / ridge objective, solved to its optimum.

Per training fold the features are standardized as ``StandardScaler`` does (dense: centre and scale; CSR: scale
only, the centering stays implicit so the matrix stays sparse; near-constant columns get scale 1, by scikit-learn's
own error bound).  The objective is scikit-learn's::

    C * sum_i loss_i(x_i W + b) + 0.5 * ||W||_F^2          (intercept b unpenalized)

with the softmax loss and K coefficient rows for K >= 3 classes, the binomial loss and one vector for 2 classes,
and L independent binomials for one-vs-rest (multi-label).  Because the intercept is unpenalized, centering the
features only moves it (``b_uncentered = b - mean @ W``), so every fold is solved centered.

Dense folds are rotated onto their principal axes (``Z = X_c V``, the eigenvectors of the centered Gram matrix, or
of ``X_c X_c^T`` when there are fewer rows than features, which is the row space: the optimum lies there).  An
orthogonal change of basis keeps the L2 penalty isotropic, and ``Z^T Z`` is diagonal, so Newton's method with
conjugate gradients (Hessian-vector products cost O(n r K)) is preconditioned by the Hessian's diagonal in the
basis (principal axis) x (eigenvectors of ``A``, the mean per-row softmax
curvature): ``C * sum_i z_ij^2 q_k' Lambda_i q_k + 1`` (one extra product per Newton step), which refines the
Kronecker-factored ``C * A (x) diag(Z^T Z) + I`` by each row's own curvature (measured: fewer CG steps on MiniLM
states and on 20-class data).  The intercept block uses ``C * n * A`` exactly (pseudo-inverted: the softmax is
blind to a common shift).  CSR folds use the same preconditioner with ``Z`` the implicitly centered scaled matrix.
Newton steps are line-searched (Armijo), CG runs to the forcing tolerance ``min(0.5, sqrt(ratio))``, and a fit
stops when the gradient is ``tol`` times its norm at zero.  Fits start at zero: warm starts from the previous
fold were measured to cost more CG steps (861 vs 646 on 5,000 x 384, 20 classes), because near-separable optima
move far between folds; the ``C="auto"`` path starts each inner fold's fit from the previous ``C``'s optimum moved
along the path's tangent (:func:`path_start`).  Ridge is
closed-form on the same rotation (CG on CSR input).

Everything runs on an array namespace (:class:`Backend`: NumPy or torch, CPU or CUDA), so the GPU path is this
code, not a copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .standard_scaling import column_statistics


#: Relative gradient norm at which a logistic fit counts as converged.
GRADIENT_TOL = 1e-10
#: Conjugate-gradient iterations allowed per Newton step.  Only ill-conditioned fits reach it (large ``C`` on
#: separable folds); there a cap of 250 cost more Newton steps than it saved (measured, MPNet layer-6 CLS states of
#: 533 fortunes, 768 dims, 8 classes, C = 10 ... 1e4: 29.8 s at 250, 20.0 s at 500, 18.6 s at 1000, 20.1 s at 2000).
MAX_CG = 1000
#: Relative residual of the path tangent's CG solve (:func:`path_start`; measured best of 0.3, 0.1, 0.01, 0.001).
TANGENT_TOL = 1e-2


# --------------------------------------------------------------------------------------------------- backend
@dataclasses.dataclass(frozen=True)
class Backend:
    """The few array operations the solver needs, on NumPy (CPU) or torch (``device``: "cpu", "cuda", ...)."""

    library: str = "numpy"
    device: str = "cpu"

    @property
    def _torch(self) -> Any:
        import torch

        return torch

    def asarray(self, a: Any) -> Any:
        if self.library == "numpy":
            return np.asarray(a, dtype=np.float64)
        return self._torch.as_tensor(np.asarray(a, dtype=np.float64), device=self.device)

    def numpy(self, a: Any) -> np.ndarray:
        return a if self.library == "numpy" else a.detach().cpu().numpy()

    def sparse(self, csr: Any) -> Any:
        """A CSR matrix in float64 on this backend (``X @ dense`` must work)."""
        csr = csr.astype(np.float64)
        if self.library == "numpy":
            return csr
        import warnings

        torch = self._torch
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return torch.sparse_csr_tensor(torch.as_tensor(csr.indptr, dtype=torch.int64),
                                           torch.as_tensor(csr.indices, dtype=torch.int64),
                                           torch.as_tensor(csr.data), size=csr.shape, device=self.device,
                                           check_invariants=False)

    def zeros(self, shape: tuple[int, ...]) -> Any:
        if self.library == "numpy":
            return np.zeros(shape)
        return self._torch.zeros(shape, dtype=self._torch.float64, device=self.device)

    def sum(self, a: Any, axis: int | None = None) -> Any:
        if self.library == "numpy":
            return a.sum() if axis is None else a.sum(axis=axis)
        return a.sum() if axis is None else a.sum(dim=axis)

    def amax(self, a: Any, axis: int) -> Any:
        return a.max(axis=axis, keepdims=True) if self.library == "numpy" else a.amax(dim=axis, keepdim=True)

    def exp(self, a: Any) -> Any:
        return np.exp(a) if self.library == "numpy" else self._torch.exp(a)

    def log(self, a: Any) -> Any:
        return np.log(a) if self.library == "numpy" else self._torch.log(a)

    def softplus(self, a: Any) -> Any:
        """log(1 + exp(a)), without overflow."""
        return np.logaddexp(0.0, a) if self.library == "numpy" else self._torch.nn.functional.softplus(a)

    def sigmoid(self, a: Any) -> Any:
        if self.library == "numpy":
            from scipy.special import expit

            return expit(a)
        return self._torch.sigmoid(a)

    def single(self, a: Any) -> Any:
        return a.astype(np.float32) if self.library == "numpy" else a.to(self._torch.float32)

    def double(self, a: Any) -> Any:
        return a.astype(np.float64) if self.library == "numpy" else a.to(self._torch.float64)

    def eigh(self, a: Any) -> tuple[Any, Any]:
        return np.linalg.eigh(a) if self.library == "numpy" else self._torch.linalg.eigh(a)

    def sqrt(self, a: Any) -> Any:
        return np.sqrt(a) if self.library == "numpy" else self._torch.sqrt(a)

    def where(self, mask: Any, a: Any, b: Any) -> Any:
        return np.where(mask, a, b) if self.library == "numpy" else self._torch.where(mask, a, b)

    def diag(self, a: Any) -> Any:
        return np.diag(a) if self.library == "numpy" else self._torch.diag(a)

    def item(self, a: Any) -> float:
        return float(a)

    def inner(self, a: Any, b: Any) -> float:
        """``sum(a * b)`` over every entry, as a float: one BLAS dot product on NumPy (no temporary)."""
        return float(np.vdot(a, b)) if self.library == "numpy" else float(self._torch.sum(a * b))

    def empty(self, shape: tuple[int, ...]) -> Any:
        if self.library == "numpy":
            return np.empty(shape)
        return self._torch.empty(shape, dtype=self._torch.float64, device=self.device)


def backend_for(device: str) -> Backend:
    """NumPy for "cpu"; torch on ``device`` otherwise (a clear error names the missing piece)."""
    if device == "cpu":
        return Backend()
    from .._base.extras import install_hint
    from ..errors import MetricError

    try:
        import torch
    except ImportError as exc:
        raise MetricError(f"device={device!r} needs torch ({install_hint('torch')}); or use device='cpu'") from exc
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise MetricError(f"device={device!r}: torch sees no CUDA device; use device='cpu'")
    return Backend("torch", device)


# ---------------------------------------------------------------------------------------------- fold basis
@dataclasses.dataclass
class FoldBasis:
    """One training fold, standardized and centered, as the linear operator ``Z`` the solver works in.

    ``mean``/``scale`` are the fold's StandardScaler statistics (raw feature space); ``V`` maps solver
    coefficients to standardized-space coefficients (``None``: the identity, for CSR input); ``colsq`` is the
    squared norm of each column of ``Z``.  Dense: ``Z`` is explicit (n x r).  CSR: ``Z = X / scale - 1 mu^T``
    applied implicitly.
    """

    backend: Backend
    mean: Any
    scale: Any
    colsq: Any
    V: Any = None
    Z: Any = None
    X: Any = None          # CSR, scaled (CSR path only)
    XT: Any = None         # its transpose as CSR (CSR path only)
    mu: Any = None         # the scaled column means (CSR path only)
    Z2: Any = None         # Z * Z, made on first use (dense path)
    Z32: Any = None        # [Z, 1] in float32, made on first use (dense path): for Hessian-vector products only
    X2T: Any = None        # (X * X)^T as CSR (CSR path only)

    def dot(self, W: Any) -> Any:
        if self.Z is not None:
            return self.Z @ W
        return self.X @ W - (self.mu @ W)[None, :]

    def curvature_dot(self, D: Any) -> Any:
        """``Z @ D[:-1] + D[-1]``, the logits' direction of a step ``D = [W; b]``, for a Hessian-vector product: in
        float32 on dense folds, as one product with ``[Z, 1]`` (half the memory traffic of float64; measured on a
        16,000 x 384, 20-class fold: the same CG steps and optimum, 1.9x faster)."""
        if self.Z is None:
            return self.dot(D[:-1]) + D[-1][None, :]
        return self.backend.double(self._single_Z() @ self.backend.single(D))

    def curvature_rdot(self, G: Any) -> Any:
        """``[Z^T G; 1^T G]`` for a Hessian-vector product (float32 on dense folds, as :meth:`curvature_dot`)."""
        if self.Z is None:
            out = self.backend.empty((self.colsq.shape[0] + 1, G.shape[1]))
            out[:-1], out[-1] = self.rdot(G), self.backend.sum(G, 0)
            return out
        return self.backend.double(self._single_Z().T @ self.backend.single(G))

    def _single_Z(self) -> Any:
        if self.Z32 is None:
            be = self.backend
            augmented = be.empty((self.Z.shape[0], self.Z.shape[1] + 1))
            augmented[:, :-1], augmented[:, -1] = self.Z, 1.0
            self.Z32 = be.single(augmented)
        return self.Z32

    def squared_rdot(self, M: Any) -> Any:
        """``(Z * Z)^T M``: per-column curvature sums, for the diagonal of the Hessian."""
        if self.Z is not None:
            if self.Z2 is None:
                self.Z2 = self.Z * self.Z
            return self.Z2.T @ M
        return self.X2T @ M - 2 * self.mu[:, None] * (self.XT @ M) + (self.mu ** 2)[:, None] * self.backend.sum(M, 0)[None, :]

    def rdot(self, G: Any) -> Any:
        if self.Z is not None:
            return self.Z.T @ G
        return self.XT @ G - self.mu[:, None] * self.backend.sum(G, 0)[None, :]

    def to_standardized(self, W: Any) -> Any:
        return W if self.V is None else self.V @ W

    def from_standardized(self, W: Any) -> Any:
        return W if self.V is None else self.V.T @ W

    def to_original(self, W: Any, b: Any) -> tuple[Any, Any]:
        """(coef, intercept) on raw features, from centered solver coordinates."""
        W_std = self.to_standardized(W)
        coef = W_std / self.scale[:, None]
        return coef, b - self.mean @ coef

    def from_original(self, coef: Any, intercept: Any) -> tuple[Any, Any]:
        """Solver coordinates of a raw-feature model (a warm start from another fold)."""
        return self.from_standardized(coef * self.scale[:, None]), intercept + self.mean @ coef


def fold_basis(X: Any, backend: Backend, sparse_input: bool) -> FoldBasis:
    """Standardize one training fold and rotate it onto its principal axes (dense) or wrap it (CSR)."""
    mean, scale, var = column_statistics(X, sparse_input)
    n, d = X.shape
    if sparse_input:
        from scipy import sparse

        Xs = (X.astype(np.float64) @ sparse.diags(1.0 / scale, format="csr")).tocsr()
        return FoldBasis(backend, backend.asarray(mean), backend.asarray(scale), backend.asarray(n * var / scale ** 2),
                         X=backend.sparse(Xs), XT=backend.sparse(Xs.T.tocsr()),
                         X2T=backend.sparse(Xs.multiply(Xs).T.tocsr()), mu=backend.asarray(mean / scale))
    Xc = (backend.asarray(X) - backend.asarray(mean)[None, :]) / backend.asarray(scale)[None, :]
    if n >= d:
        evals, V = backend.eigh(Xc.T @ Xc)
        keep = _rank_mask(backend, evals, n, d)
        V = V[:, keep]
        Z = Xc @ V
        colsq = backend.sum(Z * Z, 0)
    else:
        evals, U = backend.eigh(Xc @ Xc.T)
        keep = _rank_mask(backend, evals, n, d)
        U, s = U[:, keep], backend.sqrt(evals[keep])
        Z = U * s[None, :]
        V = (Xc.T @ U) / s[None, :]
        colsq = s * s
    return FoldBasis(backend, backend.asarray(mean), backend.asarray(scale), colsq, V=V, Z=Z)


def _rank_mask(backend: Backend, evals: Any, n: int, d: int) -> Any:
    top = backend.item(evals[-1]) if evals.shape[0] else 0.0
    return evals > max(top, 0.0) * max(n, d) * np.finfo(np.float64).eps * 10


# ------------------------------------------------------------------------------------------------ logistic
@dataclasses.dataclass
class LogisticFit:
    """Solver coordinates ``theta = [W; b]`` ((r + 1) x K) and how the Newton iteration went."""

    theta: Any
    newton_iterations: int
    cg_iterations: int
    converged: bool
    gradient_ratio: float


def _loss_parts(be: Backend, kind: str, logits: Any, Y: Any) -> tuple[Any, Any]:
    """The summed loss and the per-row probabilities (softmax or sigmoid) at ``logits``."""
    if kind == "softmax":
        shifted = logits - be.amax(logits, 1)
        e = be.exp(shifted)
        total = be.sum(e, 1)[:, None]
        P = e / total
        return be.sum(be.log(total)) - be.sum(Y * shifted), P
    return be.sum(be.softplus(logits) - Y * logits), be.sigmoid(logits)


def _curvature_times(kind: str, P: Any, D: Any, be: Backend) -> Any:
    """Each row's Hessian of the loss in logit space, applied to that row of ``D`` (overwritten)."""
    if kind == "softmax":
        D *= P
        D -= P * be.sum(D, 1)[:, None]
        return D
    D *= P * (1.0 - P)
    return D


def _mean_curvature(kind: str, P: Any, be: Backend) -> Any:
    n = P.shape[0]
    if kind == "softmax":
        return (be.diag(be.sum(P, 0)) - P.T @ P) / n
    return be.diag(be.sum(P * (1.0 - P), 0) / n)


def fit_logistic(basis: FoldBasis, Y: Any, kind: str, C: float, *, theta0: Any = None, max_iter: int = 1000,
                 tol: float = GRADIENT_TOL) -> LogisticFit:
    """Minimize ``C * sum loss + 0.5 ||W||^2`` by line-searched Newton-CG; ``Y`` is one-hot (softmax) or 0/1 columns.

    Converged means the gradient norm is at most ``tol`` times its norm at ``theta = 0``.
    """
    be = basis.backend
    n, K = Y.shape
    r = basis.colsq.shape[0]

    def logits_of(theta: Any) -> Any:
        return basis.dot(theta[:-1]) + theta[-1][None, :]

    def gradient(theta: Any, P: Any) -> Any:
        G = P - Y
        g = be.zeros((r + 1, K))
        g[:-1] = C * basis.rdot(G) + theta[:-1]
        g[-1] = C * be.sum(G, 0)
        return g

    def objective(theta: Any, loss: Any) -> float:
        return be.item(C * loss + 0.5 * be.sum(theta[:-1] * theta[:-1]))

    zero = be.zeros((r + 1, K))
    norm0 = be.item(be.sqrt(be.sum(gradient(zero, _loss_parts(be, kind, be.zeros((n, K)), Y)[1]) ** 2)))
    theta = zero if theta0 is None else theta0
    logits = logits_of(theta)
    loss, P = _loss_parts(be, kind, logits, Y)
    f = objective(theta, loss)
    cg_total, ratio, converged, iteration = 0, 1.0, norm0 == 0.0, 0
    for iteration in range(max_iter + 1):
        g = gradient(theta, P)
        gnorm = be.item(be.sqrt(be.sum(g * g)))
        ratio = gnorm / norm0 if norm0 else 0.0
        if ratio <= tol:
            converged = True
            break
        if iteration == max_iter:
            break
        hvp, precondition = _newton_system(basis, kind, C, P)
        # Superlinear forcing (sqrt of the ratio), but never more accurate than the tolerance needs: the last
        # step's CG stops once it has gained the factor still missing (measured: 95 -> 18 CG steps, 20 classes).
        forcing = max(min(0.5, ratio ** 0.5), min(0.5, 0.3 * tol / ratio))
        step, used = _pcg(be, hvp, precondition, -g, forcing * gnorm)
        cg_total += used
        direction = logits_of(step)
        slope = be.item(be.sum(g * step))
        t, accepted = 1.0, False
        for _ in range(40):
            candidate_loss, candidate_P = _loss_parts(be, kind, logits + t * direction, Y)
            candidate = theta + t * step
            f_new = objective(candidate, candidate_loss)
            if f_new <= f + 1e-4 * t * slope + 1e-13 * abs(f):
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        theta, logits, P, f = candidate, logits + t * direction, candidate_P, f_new
    return LogisticFit(theta, iteration, cg_total, converged, ratio)


def _newton_system(basis: FoldBasis, kind: str, C: float, P: Any) -> tuple[Any, Any]:
    """The Hessian-vector product and the preconditioner of the objective at probabilities ``P``."""
    be = basis.backend
    n = P.shape[0]
    evals, Q = be.eigh(_mean_curvature(kind, P, be))
    # The Hessian's diagonal in the (principal axis) x (curvature eigenvector) basis: row i's curvature
    # along eigenvector q is q' (diag(p_i) - p_i p_i') q (softmax) or p_i (1 - p_i) (binomial).
    PQ = P @ Q
    M = (P @ (Q * Q)) - PQ * PQ if kind == "softmax" else P * (1.0 - P)
    coef_scale = C * basis.squared_rdot(M) + 1.0
    top = max(be.item(evals[-1]), 0.0)
    icpt_scale = be.where(evals > top * 1e-10, 1.0 / (C * n * be.where(evals > 0, evals, 1.0)), 0.0 * evals)

    def precondition(R: Any) -> Any:
        out = be.empty(R.shape)
        out[:-1] = ((R[:-1] @ Q) / coef_scale) @ Q.T
        out[-1] = ((R[-1] @ Q) * icpt_scale) @ Q.T
        return out

    def hvp(D: Any) -> Any:
        # The products in float32: CG only needs an approximate Newton direction; the gradient, the line
        # search and the stopping test stay float64, so the optimum is the float64 one.
        out = basis.curvature_rdot(_curvature_times(kind, P, basis.curvature_dot(D), be))
        out *= C
        out[:-1] += D[:-1]
        return out

    return hvp, precondition


def path_start(basis: FoldBasis, Y: Any, kind: str, C: float, theta: Any, next_C: float) -> Any:
    """A start for the fit at ``next_C`` predicted from the optimum ``theta`` at ``C`` along the path's tangent.

    With ``t = log C`` the optimum satisfies ``C grad L(theta) + [W; 0] = 0``; differentiating in ``t`` gives
    ``H theta' = [W; 0]`` with ``H`` the Newton Hessian at the optimum, so one more preconditioned CG solve (to 1%)
    gives the tangent and the start is ``theta + log(next_C / C) theta'``.  Measured on MiniLM states of tweets
    (800-row inner folds, 3 classes, C = 1e-4 ... 1e4): the path's fits need 2-5 instead of 5-7 Newton steps at
    C >= 10 and the whole path costs 0.78 instead of 1.26 s, tangents included.  The start only saves steps: the
    fit still runs to the same optimum.
    """
    be = basis.backend
    logits = basis.dot(theta[:-1]) + theta[-1][None, :]
    hvp, precondition = _newton_system(basis, kind, C, _loss_parts(be, kind, logits, Y)[1])
    rhs = be.zeros(theta.shape)
    rhs[:-1] = theta[:-1]
    tangent, _ = _pcg(be, hvp, precondition, rhs, TANGENT_TOL * be.item(be.sqrt(be.sum(rhs * rhs))))
    return theta + float(np.log(next_C / C)) * tangent


def _pcg(be: Backend, hvp: Any, precondition: Any, rhs: Any, tol: float) -> tuple[Any, int]:
    """Preconditioned conjugate gradients for ``H x = rhs``, to ``||residual|| <= tol`` (or MAX_CG steps)."""
    x = be.zeros(rhs.shape)
    residual = rhs * 1.0  # a copy: updated in place
    p = precondition(residual)
    rz = be.inner(residual, p)
    squared_tol = tol * tol
    for step in range(MAX_CG):
        if be.inner(residual, residual) <= squared_tol:
            return x, step
        Hp = hvp(p)
        curvature = be.inner(p, Hp)
        if curvature <= 0.0:
            return (x if step else p), step
        alpha = rz / curvature
        x += alpha * p
        Hp *= alpha
        residual -= Hp
        z = precondition(residual)
        rz_new = be.inner(residual, z)
        p *= rz_new / rz
        p += z
        rz = rz_new
    return x, MAX_CG


# ------------------------------------------------------------------------------------------------------ ridge
def fit_ridge(basis: FoldBasis, Y: Any, alpha: float) -> Any:
    """``Ridge(alpha)`` with an intercept, as ``theta = [W; b]``: closed form on the rotation, CG on CSR."""
    be = basis.backend
    mean = be.sum(Y, 0) / Y.shape[0]
    rhs = basis.rdot(Y - mean[None, :])
    if basis.Z is not None:
        W = rhs / (basis.colsq[:, None] + alpha)
    else:
        diagonal = basis.colsq[:, None] + alpha
        diagonal = be.where(diagonal > 0, diagonal, 1.0 + 0.0 * diagonal)
        scale = be.item(be.sqrt(be.sum(rhs * rhs)))
        W, _ = _pcg(be, lambda D: basis.rdot(basis.dot(D)) + alpha * D, lambda R: R / diagonal, rhs,
                    GRADIENT_TOL * scale)
    theta = be.zeros((W.shape[0] + 1, W.shape[1]))
    theta[:-1] = W
    theta[-1] = mean
    return theta


# ------------------------------------------------------------------------------------------------ one fold
@dataclasses.dataclass
class FoldModel:
    """A fitted probe on raw features: ``decision = X @ coef + intercept`` (NumPy), and how to read it.

    ``classes``: the class codes of the training fold's columns (single-label); ``constant``: per-label constant
    predictions of labels that do not vary in the training fold (multi-label, else ``None``).
    """

    target_type: str
    coef: np.ndarray
    intercept: np.ndarray
    classes: np.ndarray | None = None
    constant: np.ndarray | None = None
    fits: tuple[LogisticFit, ...] = ()
    warm: tuple[Any, Any, Any] | None = None   # (problem key, coef, intercept) on the backend, for the next fit

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """Predictions on raw rows and each decision's margin (distance of the deciding logit to the runner-up)."""
        decision = np.asarray(X @ self.coef) + self.intercept[None, :]
        if self.target_type == "regression":
            return decision, None
        if self.target_type == "multi_label":
            predicted = np.zeros((decision.shape[0], self.constant.shape[0]), dtype=np.int8)
            varying = self.constant < 0
            predicted[:, varying] = decision > 0
            predicted[:, ~varying] = self.constant[~varying]
            return predicted, np.abs(decision)
        if decision.shape[1] == 1:
            return self.classes[(decision[:, 0] > 0).astype(int)], np.abs(decision[:, 0])
        top2 = np.sort(decision, axis=1)[:, -2:]
        return self.classes[decision.argmax(axis=1)], top2[:, 1] - top2[:, 0]


def fit_fold(basis: FoldBasis, y: np.ndarray, target_type: str, *, C: float, alpha: float, max_iter: int,
             warm: tuple[Any, Any, Any] | None = None) -> FoldModel:
    """Fit the probe of ``target_type`` on one standardized training fold (``y``: that fold's targets).

    ``warm`` (a previous :class:`FoldModel`'s ``warm``, or :func:`path_warm`'s start) starts the Newton iteration
    from that model, carried into this fold's basis, when it solved the same problem (same loss and classes).
    """
    from ..errors import MetricError

    be = basis.backend
    if target_type == "regression":
        theta = fit_ridge(basis, be.asarray(y.reshape(len(y), -1)), alpha)
        return _model(basis, theta, target_type)
    if target_type == "single_label":
        classes = np.unique(y)
        if classes.size < 2:
            raise MetricError(f"a training fold holds one class only (code {classes[0]}); a logistic probe needs "
                              "two: lower n_splits or drop rare classes")
        key = ("sigmoid" if classes.size == 2 else "softmax", tuple(classes.tolist()))
        fit = _fit(basis, be.asarray(_logistic_targets(y, target_type, key)), key[0], C, max_iter, key, warm)
        return _model(basis, fit.theta, target_type, classes=classes, fits=(fit,), key=key)
    column_max, column_min = y.max(axis=0), y.min(axis=0)
    constant = np.where(column_max == column_min, column_max, -1).astype(np.int8)
    varying = constant < 0
    key = ("sigmoid", tuple(np.flatnonzero(varying).tolist()))
    if not varying.any():
        theta = be.zeros((basis.colsq.shape[0] + 1, 0))
        return _model(basis, theta, target_type, constant=constant)
    fit = _fit(basis, be.asarray(_logistic_targets(y, target_type, key)), "sigmoid", C, max_iter, key, warm)
    return _model(basis, fit.theta, target_type, constant=constant, fits=(fit,), key=key)


def _logistic_targets(y: np.ndarray, target_type: str, key: tuple[str, tuple[int, ...]]) -> np.ndarray:
    """The 0/1 targets of the logistic fit ``key`` names (its loss and columns): one column per class (softmax), the
    second class's (sigmoid, two classes) or each varying label's (multi-label)."""
    kind, columns = key
    if target_type == "multi_label":
        return y[:, list(columns)].astype(np.float64)
    if kind == "sigmoid":
        return (y == columns[1]).astype(np.float64)[:, None]
    return (y[:, None] == np.asarray(columns)[None, :]).astype(np.float64)


def path_warm(basis: FoldBasis, model: FoldModel, y: np.ndarray, C: float,
              next_C: float) -> tuple[Any, Any, Any] | None:
    """A ``warm`` start for the fit at ``next_C`` of the problem ``model`` solved at ``C`` on ``basis`` (targets
    ``y``): :func:`path_start`'s tangent prediction, or the model's own optimum when its fit did not converge (or
    it fitted no logistic loss).  Asked only once the path goes on, so a stopped search pays no unused tangent."""
    if not model.fits or not model.fits[0].converged:
        return model.warm
    key = model.warm[0]
    Y = basis.backend.asarray(_logistic_targets(y, model.target_type, key))
    theta = path_start(basis, Y, key[0], C, model.fits[0].theta, next_C)
    return (key, *basis.to_original(theta[:-1], theta[-1]))


def _fit(basis: FoldBasis, Y: Any, kind: str, C: float, max_iter: int, key: Any,
         warm: tuple[Any, Any, Any] | None) -> LogisticFit:
    theta0 = None
    if warm is not None and warm[0] == key:
        W, b = basis.from_original(warm[1], warm[2])
        theta0 = basis.backend.zeros((W.shape[0] + 1, W.shape[1]))
        theta0[:-1], theta0[-1] = W, b
    return fit_logistic(basis, Y, kind, C, theta0=theta0, max_iter=max_iter)


def _model(basis: FoldBasis, theta: Any, target_type: str, *, classes: np.ndarray | None = None,
           constant: np.ndarray | None = None, fits: tuple[LogisticFit, ...] = (), key: Any = None) -> FoldModel:
    coef, intercept = basis.to_original(theta[:-1], theta[-1])
    be = basis.backend
    return FoldModel(target_type, be.numpy(coef), be.numpy(intercept), classes, constant, fits,
                     None if key is None else (key, coef, intercept))


# ------------------------------------------------------------------------------------------ C by inner CV
def search_stopped(means: list[float], patience: int | None) -> bool:
    """Whether a search along the grid, from the smallest ``C`` up, stops after the mean inner scores ``means``: the
    last ``patience`` of them all below the best before them (``None``: never).  A shortcut, not the grid search:
    a later rise above the best is not seen (how often that changes the choice: docs/metrics.md)."""
    return (patience is not None and len(means) > patience
            and max(means[-patience:]) < max(means[:-patience]))


def choose_C(X: Any, y: np.ndarray, inner_splits: list[tuple[np.ndarray, np.ndarray]], grid: tuple[float, ...],
             target_type: str, score: Any, *, backend: Backend, sparse_input: bool, max_iter: int,
             patience: int | None = None) -> tuple[float, list[float], list[FoldModel]]:
    """The grid value with the best mean inner-fold score (the smallest on ties, as ``GridSearchCV``), each inner
    fold's path started from the tangent prediction of its previous ``C`` (:func:`path_start`); returns it, the mean
    scores of the values evaluated and the inner models at it.

    ``patience``: stop the path once :func:`search_stopped` (``None``: every value of the grid).
    """
    bases = [fold_basis(X[train], backend, sparse_input) for train, _ in inner_splits]
    warm: list[Any] = [None] * len(inner_splits)
    means: list[float] = []
    models_at_best, best = [], -np.inf
    path = sorted(grid)
    models: list[FoldModel] = []
    for previous_C, C in zip([None, *path[:-1]], path):
        if search_stopped(means, patience):
            break
        if previous_C is not None:  # the path goes on: each inner fold starts from its tangent prediction
            warm = [path_warm(basis, model, y[train], previous_C, C)
                    for (train, _), basis, model in zip(inner_splits, bases, models)]
        models = [fit_fold(basis, y[train], target_type, C=C, alpha=0.0, max_iter=max_iter, warm=start)
                  for (train, _), basis, start in zip(inner_splits, bases, warm)]
        mean = float(np.mean([score(y[test], model.predict(X[test])[0])
                              for (_, test), model in zip(inner_splits, models)]))
        means.append(mean)
        if mean > best:
            best, chosen, models_at_best = mean, C, models
    return chosen, means, models_at_best
