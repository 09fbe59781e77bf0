"""The options a long-running process (coordinator serve, worker run) takes for what it tells
operators: metrics, logs and trace export. One definition, so both read the same in --help."""

from __future__ import annotations

import argparse

from shared import logs


def add_to(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus metrics over HTTP at /metrics there (port 0: any free);"
        " default: none",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="json",
        help="json: one JSON object per line with the run, action, worker and trace ids (default)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        metavar="HOST:PORT",
        help="export trace spans over OTLP/gRPC (wins over OTEL_EXPORTER_OTLP_ENDPOINT;"
        " default: no export)",
    )
