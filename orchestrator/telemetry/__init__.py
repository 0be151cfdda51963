"""Telemetry for Berth's processes: metrics (this package's `metrics_setup`) and, beside it, traces."""

from .metrics_setup import install_metrics, metrics_text, serve_metrics

__all__ = ["install_metrics", "metrics_text", "serve_metrics"]
