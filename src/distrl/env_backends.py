"""The env backends ``env.backend`` may name, in one table: a new backend is its module plus one
line here. Torch-free (the config reads the names), and a backend's module is imported only when
a run uses it, so optional packages stay optional."""

from __future__ import annotations

from dataclasses import dataclass

from distrl.extras import require_extra


@dataclass(frozen=True)
class EnvBackend:
    name: str
    builder: str
    """``module:function`` of ``(EnvConfig, seeds, device) -> VecEnv``."""
    images: bool = False
    """Hands over image observations (the others' envs are feature vectors)."""
    extra: str | None = None
    """The ``distrl[...]`` extra that installs ``packages``."""
    packages: tuple[str, ...] = ()
    """Top-level imports the backend needs beyond distrl's own dependencies."""
    jax_native: bool = False
    """Its envs are JAX functions a JAX learner steps inside its compiled loop
    (``distrl.envs.jax_envs``)."""

    def require_packages(self) -> None:
        """One line naming the extra to install when one of ``packages`` is missing."""
        if self.extra is not None:
            require_extra(
                self.extra, self.packages, f"env.backend={self.name} needs {' and '.join(self.packages)}"
            )


ENV_BACKENDS: dict[str, EnvBackend] = {
    backend.name: backend
    for backend in (
        EnvBackend("gymnasium", "distrl.envs.gymnasium_backend:make_gymnasium_vec_env", images=True),
        EnvBackend(
            "gymnasium_async", "distrl.envs.gymnasium_backend:make_gymnasium_async_vec_env", images=True
        ),
        EnvBackend(
            "envpool",
            "distrl.envs.envpool_backend:make_envpool_vec_env",
            images=True,
            extra="envpool",
            packages=("envpool",),
        ),
        EnvBackend("torch", "distrl.envs.torch_backend:make_torch_vec_env"),
        EnvBackend(
            "gymnax",
            "distrl.envs.gymnax_backend:make_gymnax_vec_env",
            extra="jax",
            packages=("jax", "gymnax"),
            jax_native=True,
        ),
        EnvBackend(
            "brax",
            "distrl.envs.brax_backend:make_brax_vec_env",
            extra="brax",
            packages=("jax", "brax"),
            jax_native=True,
        ),
        EnvBackend(
            "ale",
            "distrl.envs.ale_backend:make_ale_vec_env",
            images=True,
            extra="atari",
            packages=("ale_py",),
        ),
    )
}
"""By ``env.backend`` name, in the order the config's reference lists them."""
