"""Serve the deployments: the same three flows ``prefect.yaml`` describes for a work pool."""

from __future__ import annotations

NIGHTLY_CRON = "0 2 * * *"


def deployments():
    from flows.method_flows import all_methods, method_flow, nightly_retrain

    return [
        method_flow.to_deployment(name="method", tags=["paperline"]),
        all_methods.to_deployment(name="all-methods", tags=["paperline"]),
        nightly_retrain.to_deployment(name="nightly", cron=NIGHTLY_CRON, tags=["paperline", "nightly"]),
    ]


def serve() -> None:
    from prefect import serve as prefect_serve

    # pause_on_shutdown=False: stopping the server must not pause the nightly schedule.
    prefect_serve(*deployments(), pause_on_shutdown=False)
