"""The `spec-cli` command.  Each command parses its options, builds a
Session (or a registry query), and renders; one module per command group.
Errors become exit codes here, in one place, by type.

Heavy modules (llama_cpp, numpy, huggingface_hub) are imported inside the
commands so that `spec-cli --help` is instant.
"""

from __future__ import annotations

import sys

import typer

from ..errors import SpecError
from .batch import batch
from .bench import bench, report
from .chat import chat
from .complete import complete
from .generate import generate
from .rpcserver import rpc_server
from .models import models_app
from .serve import serve

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Exact speculative decoding for local GGUF models on llama.cpp. The acceptance "
                       "rule is exact; by default the output is the target's up to floating-point "
                       "rounding, and with --deterministic bit for bit.")
def _short(command) -> str:
    """A command's first paragraph as one line, for the command list (the
    terminal wraps it)."""
    return " ".join((command.__doc__ or "").strip().split("\n\n")[0].split())


for command in (generate, chat, complete, serve, batch, bench, report):
    app.command(short_help=_short(command))(command)
app.command("rpc-server", short_help=_short(rpc_server))(rpc_server)
app.add_typer(models_app, name="models")


def _version(value: bool) -> None:
    if value:
        from .. import __version__
        print(f"spec-cli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Exact speculative decoding for local GGUF models on llama.cpp."""


def _usage_error(e: BaseException) -> bool:
    """A usage error from click (or the copy of click newer typer vendors)."""
    return hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int)


def main() -> None:
    """Entry point: expected failures print one message and exit non-zero,
    never a traceback.

    SpecError -> its message and hint, its exit_code (1 unless it says);
    a usage error -> click's usage line, 2; Ctrl-C or an abort -> 130."""
    from ..crash import install

    install()  # a native crash says what to do, not a bare exit 132
    try:
        code = app(standalone_mode=False)  # click hands back typer.Exit codes
        sys.exit(code if isinstance(code, int) else 0)
    except SpecError as e:
        from ..term import render
        render.error(e.message, e.hint)
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:
        if _usage_error(e):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.stderr.write("\naborted\n")
            sys.exit(130)
        raise
