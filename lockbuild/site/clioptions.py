"""The options the site wing's commands share: the store, and how long to wait for its lock."""

from __future__ import annotations

from pathlib import Path

import click

store_option = click.option(
    "--store", "store_dir", type=click.Path(path_type=Path, file_okay=False), required=True, help="The site store."
)
wait_option = click.option(
    "--wait", type=float, default=0.0, show_default=True, help="Seconds to wait for another import, pull or gc."
)
