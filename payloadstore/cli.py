"""`payloadstore`: the command line of the SDK.

Exit codes: 0 ok; 1 the job failed (remote error), was cancelled, or another error; 2 usage or configuration;
3 auth (bad, revoked or foreign token); 4 job not found; 5 still pending after --wait;
6 payload over the cap; 7 control plane unreachable or unhealthy; 8 payload corrupt or lost.
Errors are one line on stderr: `error: <what happened and what to do>`.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import click

# Each command group's module adds its commands to `cli` as it is imported: one module per group
# (jobs, operating on jobs, queues and views, running daemons, tokens and policies).
from . import _cli_admin, _cli_daemon, _cli_jobs, _cli_operate, _cli_queues  # noqa: F401
from ._cli_admin import LambdaTokenAdmin, TokenRecord, token_store
from ._cli_output import dumps_json, emit_value, fail, json_safe
from ._cli_root import Settings, cli

__all__ = [
    "LambdaTokenAdmin",
    "Settings",
    "TokenRecord",
    "cli",
    "dumps_json",
    "emit_value",
    "fail",
    "json_safe",
    "main",
    "terminate_as_interrupt",
    "token_store",
]


def terminate_as_interrupt() -> None:
    """SIGTERM ends the command as Ctrl-C does (exit 143): a transfer in hand stops within a
    round and removes its temporary files, where the default action would kill the process
    with them left behind. `payloadstore daemon` installs its own handlers while it runs."""
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_term)


def main(argv: list[str] | None = None) -> None:
    """The console script: whatever goes wrong is one `error:` line (exit 1 for an error no
    command anticipated; `-v` adds its traceback), never a bare traceback."""
    terminate_as_interrupt()
    try:
        code = cli.main(args=argv, prog_name="payloadstore", standalone_mode=False)
    except click.UsageError as e:
        # A bad option or argument: one line, as every other error (exit 2).
        hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
        click.echo(f"error: {e.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        # A confirmation answered no, or Ctrl-C at a prompt (as click itself: exit 1).
        click.echo("error: aborted", err=True)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - the CLI's contract: one line, whatever it was
        if "-v" in (argv or sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:]):
            import traceback

            traceback.print_exc()
        click.echo(
            f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", err=True
        )
        sys.exit(1)
    # --help, a command's ctx.exit(code): its code (0 when the command returned).
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
