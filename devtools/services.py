"""``clarion services``: private Redis and PostgreSQL under ``.clarion/`` for a machine that
runs neither (``make run`` and ``make test`` run their commands through ``services exec``).

What is started when, and where: ``devtools.local_services``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from types import FrameType

import click

from devtools.local_processes import LocalServiceError
from devtools.local_services import PROFILES, private_services, stop_left_running

HOME = ".clarion"


def _say(line: str) -> None:
    click.echo(f"clarion services: {line}", err=True)


def run_child(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` to its end and return its exit status. Ctrl-C reaches it from the
    terminal (it shares this process group) and SIGTERM is passed on to it: either way it
    ends first, and the private servers are stopped after it."""
    try:
        child = subprocess.Popen(command, env=env)  # noqa: S603 (the user's own command)
    except OSError as error:
        raise click.ClickException(f"cannot run {command[0]}: {error.strerror}") from None

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, pass_on)
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue  # the child got the same Ctrl-C: wait for it to finish
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.group()
def services() -> None:
    """Private Redis and PostgreSQL under .clarion/ when the default ones do not answer."""


@services.command("exec", context_settings={"ignore_unknown_options": True})
@click.option(
    "--for", "profile", type=click.Choice(sorted(PROFILES)), default="app", show_default=True,
    help="app: CLARION_REDIS_URL and CLARION_DATABASE_URL; tests: CLARION_TEST_REDIS_URL "
    "and CLARION_TEST_DATABASE_URL",
)  # fmt: skip
@click.option("--dir", "home", default=HOME, show_default=True, type=click.Path(path_type=Path))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_command(profile: str, home: Path, command: tuple[str, ...]) -> None:
    """Run COMMAND with private servers for the default URLs that answer nothing.

    A URL set to anything but its default is used as it is, and so is a default one that
    answers. The private servers keep their data in --dir and are stopped when COMMAND ends.
    """
    if shutil.which(command[0]) is None:  # before any server is started for it
        raise click.ClickException(f"cannot run {command[0]}: no such command")
    try:
        with private_services(home, PROFILES[profile], os.environ, _say) as exports:
            status = run_child(list(command), {**os.environ, **exports})
    except LocalServiceError as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:  # Ctrl-C while a server started: it has been stopped again
        raise SystemExit(130) from None
    raise SystemExit(status)


@services.command()
@click.option("--dir", "home", default=HOME, show_default=True, type=click.Path(path_type=Path))
def down(home: Path) -> None:
    """Stop the private servers a killed command left running in --dir (by their pid)."""
    try:
        stop_left_running(home, _say)
    except LocalServiceError as error:
        raise click.ClickException(str(error)) from None


if __name__ == "__main__":
    services(prog_name="python -m devtools.services")
