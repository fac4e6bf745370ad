"""The ``craft-operator`` command line.

Each command lives in its own module and is added to :data:`main` here.
"""

from __future__ import annotations

import click

from craft_operator import __version__
from craft_operator.cli.crd import crd
from craft_operator.cli.credentials import credentials
from craft_operator.cli.db import db
from craft_operator.cli.doctor import doctor
from craft_operator.cli.keys import keys
from craft_operator.cli.render_skill import render_skill_command
from craft_operator.cli.run import run
from craft_operator.cli.sync_user_library import sync_user_library


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="craft-operator")
def main() -> None:
    """Run and operate the Craft sandbox operator.

    Settings come from CRAFT_* environment variables (see the README).
    """


main.add_command(run)
main.add_command(crd)
main.add_command(render_skill_command)
main.add_command(keys)
main.add_command(db)
main.add_command(credentials)
main.add_command(sync_user_library)
main.add_command(doctor)
