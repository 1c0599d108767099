"""lockbuild: signed, hashed, reproducible bundles of ML inference engines for air-gapped GPU nodes."""

from lockbuild.errors import (
    FetchError,
    InstallError,
    IntegrityError,
    LockbuildError,
    RecipeError,
    ResolveError,
    SignatureError,
)

__version__ = "0.2.0"

__all__ = [
    "FetchError",
    "InstallError",
    "IntegrityError",
    "LockbuildError",
    "RecipeError",
    "ResolveError",
    "SignatureError",
    "__version__",
]
