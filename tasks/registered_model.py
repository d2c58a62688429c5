"""What a registered ``paperline.<slug>`` version is: MLflow "models from code".

MLflow copies this file into the model and runs it at load time; the model's artifacts are the method's own
model folder (state_dicts, JSON, npz) and its validated config. ``load_context`` rebuilds the model with the
method's ``load_model`` (``torch.load(weights_only=True)``, ``np.load(allow_pickle=False)``), so nothing in
the registry is a pickled Python object. Loading needs this project installed (``make install``).

Never import this module elsewhere: ``set_model`` at the bottom is how MLflow finds the model.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np


class PaperlineModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: ``predict`` feeds an array to the method's model (``forward`` or ``predict``)."""

    def load_context(self, context) -> None:
        from models.registry import get

        spec = get(context.model_config["method"])
        cfg = spec.config.model_validate_json(Path(context.artifacts["config"]).read_text())
        self.model = spec.module().load_model(cfg, Path(context.artifacts["model_dir"]))

    # An ndarray hint tells MLflow not to infer a schema (the models take plain arrays).
    def predict(self, context, model_input: np.ndarray, params=None):
        import torch

        if isinstance(self.model, torch.nn.Module):
            with torch.no_grad():
                out = self.model(torch.as_tensor(np.asarray(model_input), dtype=torch.float32))
            return out.numpy() if isinstance(out, torch.Tensor) else out
        return self.model.predict(np.asarray(model_input))


mlflow.models.set_model(PaperlineModel())
