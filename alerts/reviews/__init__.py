"""The model-review service: Alertmanager webhook in, one durable review per model-version condition."""
