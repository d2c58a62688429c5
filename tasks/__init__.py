"""The four pipeline steps as plain functions, their Prefect wrappers, tracking and the CLI."""
