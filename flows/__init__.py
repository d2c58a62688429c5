"""Prefect flows: one method's pipeline, all methods, nightly retraining; and serving them."""
