"""Overheads as OpenMetrics text, for Prometheus (the node exporter's textfile collector, a
pushgateway) and the dashboards that read it. ``exposition`` builds the metric families from
plain rows and writes them with prometheus-client; docs/metrics.md names every metric."""
