"""The five dashboards, one module each; `build()` returns a grafana-foundation-sdk Dashboard."""
