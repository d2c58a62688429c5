"""A generic MLflow pyfunc wrapper for registered models that are not ``nn.Module``s."""

from typing import Any

import mlflow.pyfunc
import numpy as np


class PredictorModel(mlflow.pyfunc.PythonModel):
    """Wraps any picklable object exposing ``predict(array) -> array``."""

    def __init__(self, predictor: Any) -> None:
        self.predictor = predictor

    # An ndarray hint tells MLflow not to infer a schema (the predictors take plain arrays).
    def predict(self, context, model_input: np.ndarray, params=None):
        return self.predictor.predict(np.asarray(model_input))
