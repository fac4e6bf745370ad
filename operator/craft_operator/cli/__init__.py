"""The ``craft-operator`` command line.

Each command lives in its own module, imported only when that command runs (or ``--help``
lists them all): ``craft-operator run`` then does not carry the other commands' imports
(the doctor's, the database's) for the life of the operator.
"""

from __future__ import annotations

import importlib

import click

from craft_operator import __version__
from craft_operator.cli import lean_kopf

lean_kopf.install()  # before any command imports kopf

#: Each command's name and where it lives (module, attribute).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("craft_operator.cli.run", "run"),
    "crd": ("craft_operator.cli.crd", "crd"),
    "render-skill": ("craft_operator.cli.render_skill", "render_skill_command"),
    "keys": ("craft_operator.cli.keys", "keys"),
    "db": ("craft_operator.cli.db", "db"),
    "credentials": ("craft_operator.cli.credentials", "credentials"),
    "sync-user-library": ("craft_operator.cli.sync_user_library", "sync_user_library"),
    "doctor": ("craft_operator.cli.doctor", "doctor"),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when they are looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The names of the commands, sorted (as click lists them)."""
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, imported now; ``None`` for an unknown name."""
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="craft-operator")
def main() -> None:
    """Run and operate the Craft sandbox operator.

    Settings come from CRAFT_* environment variables (see the README).
    """
