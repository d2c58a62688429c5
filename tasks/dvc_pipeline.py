"""``dvc.yaml`` rendered from the registry: prepare@m -> train@m -> evaluate@m over every method."""

from __future__ import annotations

import yaml

from models.registry import METHODS

SHARED_CODE = ["models/base.py", "models/common", "tasks/steps.py"]


def render_dvc_yaml() -> str:
    items = {slug: {"dataset": spec.dataset} for slug, spec in METHODS.items()}
    stages = {
        "prepare": {
            "foreach": items,
            "do": {
                "cmd": "paperline stage prepare ${key}",
                "deps": ["models/${key}", *SHARED_CODE],
                "params": ["${key}.seed", "${key}.data"],
                "outs": ["data/${item.dataset}"],
            },
        },
        "train": {
            "foreach": items,
            "do": {
                "cmd": "paperline stage train ${key}",
                "deps": ["data/${item.dataset}", "models/${key}", *SHARED_CODE],
                "params": ["${key}"],
                "outs": ["outputs/${key}/model"],
            },
        },
        "evaluate": {
            "foreach": items,
            "do": {
                "cmd": "paperline stage evaluate ${key}",
                "deps": ["data/${item.dataset}", "outputs/${key}/model", "models/${key}", *SHARED_CODE],
                "params": ["${key}"],
                "metrics": [
                    {"outputs/${key}/metrics.json": {"cache": False}},
                    {"outputs/${key}/claim.json": {"cache": False}},
                ],
                "plots": [{"outputs/${key}/plots": {"cache": False}}],
            },
        },
    }
    header = "# Generated from models/registry.py by `paperline params --write`; edit the registry, not this file.\n"
    return header + yaml.safe_dump({"stages": stages}, sort_keys=False)
