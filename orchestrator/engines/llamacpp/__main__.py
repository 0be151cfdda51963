"""`python -m orchestrator.engines.llamacpp`: serve one GGUF model through llama.cpp, OpenAI-compatible."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator.engines.llamacpp", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model-path", type=Path, required=True, help="the GGUF file (the node's cached copy)")
    parser.add_argument("--served-model-name", required=True, help="the name /v1/models lists and requests use")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed at start)")
    parser.add_argument("--n-ctx", type=int, default=0, help="context window in tokens; 0: the model's own")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for generation (llama.cpp's default)")
    parser.add_argument(
        "--default-temperature",
        type=float,
        default=1.0,
        help="temperature when a request names none (OpenAI's default is 1.0)",
    )
    parser.add_argument(
        "--chat-template-file",
        type=Path,
        default=None,
        help="a Jinja chat template to use instead of the GGUF's own tokenizer.chat_template",
    )
    parser.add_argument(
        "--usage-journal",
        type=Path,
        default=None,
        help="append every request's usage to this file and replay it at start",
    )
    parser.add_argument(
        "--timings-log",
        type=Path,
        default=None,
        help="append each streamed request's engine-side instants (monotonic clock) to this file",
    )
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    if args.n_ctx < 0:
        parser.error(f"--n-ctx: must be >= 0, got {args.n_ctx}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads: must be >= 1, got {args.threads}")
    if not 0 <= args.default_temperature <= 2:
        parser.error(f"--default-temperature: must be within 0..2, got {args.default_temperature}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port: must be within 0..65535, got {args.port}")
    template = None
    if args.chat_template_file is not None:
        try:
            template = args.chat_template_file.read_text(encoding="utf-8")
        except OSError as exc:
            parser.error(f"--chat-template-file: {exc}")
    return serve(
        args.model_path,
        args.served_model_name,
        args.host,
        args.port,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        usage_journal=args.usage_journal,
        default_temperature=args.default_temperature,
        log_level=args.log_level,
        chat_template=template,
        timings_log=args.timings_log,
    )


if __name__ == "__main__":
    sys.exit(main())
