"""What a registered ``paperline.<slug>`` version is: MLflow "models from code".

MLflow copies this file into the model and runs it at load time; the model's artifacts are the method's own
model folder (state_dicts, JSON, npz) and its validated config. ``load_context`` rebuilds the model with the
method's ``load_model`` (``torch.load(weights_only=True)``, ``np.load(allow_pickle=False)``), so nothing in
the registry is a pickled Python object. Loading needs this project installed (``make install``).

Never import this module elsewhere: ``set_model`` at the bottom is how MLflow finds the model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import mlflow


class PaperlineModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: ``predict`` feeds an array to the method's model (``forward`` or ``predict``)."""

    def load_context(self, context) -> None:
        from models.registry import get

        self.method = context.model_config["method"]
        self.expected = context.model_config.get("input")  # also the version's MLflow signature, if any
        spec = get(self.method)
        cfg = spec.config.model_validate_json(Path(context.artifacts["config"]).read_text())
        self.model = spec.module().load_model(cfg, Path(context.artifacts["model_dir"]))

    # An ndarray hint tells MLflow not to infer a schema from type hints (the signature, where logged, says it).
    def predict(self, context, model_input: np.ndarray, params=None):
        import torch

        x = self._checked(np.asarray(model_input))
        if isinstance(self.model, torch.nn.Module):
            with torch.no_grad():
                out = self.model(torch.as_tensor(x, dtype=torch.float32))
            return out.numpy() if isinstance(out, torch.Tensor) else out
        return self.model.predict(x)

    def _checked(self, x: np.ndarray) -> np.ndarray:
        """Refuse what the model would silently reshape or round (the signature does too, through pyfunc)."""
        if x.dtype.kind not in "biuf":
            raise TypeError(f"paperline.{self.method} takes a numeric array, not dtype {x.dtype}")
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            bad = int((~np.isfinite(x)).sum())
            raise ValueError(f"paperline.{self.method} takes finite values; the input holds {bad} NaN or inf")
        if self.expected is None:
            if x.dtype.kind == "b":
                raise TypeError(f"paperline.{self.method} takes numbers, not booleans")
            return x
        shape, dtype = tuple(self.expected["shape"]), np.dtype(self.expected["dtype"])
        if x.ndim != len(shape) or any(n not in (-1, m) for n, m in zip(shape, x.shape)):
            raise ValueError(f"paperline.{self.method} takes an array of shape {shape} (-1: any), not {x.shape}")
        if dtype.kind in "iu" and x.dtype.kind not in "iu":
            raise TypeError(f"paperline.{self.method} takes {dtype} values, not {x.dtype} (floats are not rounded)")
        if x.dtype.kind == "b" and dtype.kind != "b":
            raise TypeError(f"paperline.{self.method} takes {dtype} values, not booleans")
        return x


mlflow.models.set_model(PaperlineModel())
