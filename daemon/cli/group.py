"""The `ckpt` group: global options, and the table of commands, each imported only when run.

`ckpt best` loads `cli.checkpoints` and nothing of the retention, artifact or admin commands;
`ckpt --help` loads them all to show their one-line help."""

from __future__ import annotations

import importlib

import click

from ..core.errors import exit_code_text
from .context import Context

# Command name -> "module:attribute" inside this package, for every top-level command and group.
COMMANDS = {
    "scan": "checkpoints:scan",
    "list": "checkpoints:list_command",
    "show": "checkpoints:show",
    "describe": "describe:describe",
    "best": "checkpoints:best",
    "latest": "latest:latest",
    "wait": "wait:wait",
    "runs": "checkpoints:runs",
    "history": "history:history",
    "plot": "history:plot",
    "du": "history:du",
    "prune": "retention:prune",
    "pin": "retention:pin",
    "unpin": "retention:unpin",
    "trash": "retention:trash",
    "restore": "versions:restore",
    "log": "retention:log_command",
    "split": "artifacts:split",
    "compress": "artifacts:compress",
    "verify": "artifacts:verify",
    "serve": "admin:serve",
    "status": "admin:status",
    "db": "admin:db",
    "config": "admin:config_group",
    "metrics": "prometheus:metrics",
    "web": "web:web",
    "tier": "remote:tier",
    "fetch": "remote:fetch",
    "jobs": "pipeline:jobs",
    "stage": "pipeline:stage",
    "integrity": "pipeline:integrity",
}


class LazyGroup(click.Group):
    """A group whose commands are named in `COMMANDS` and imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        module = importlib.import_module(f"{__package__}.{module_name}")
        command: click.Command = getattr(module, attribute)
        return command


@click.group(
    cls=LazyGroup,
    epilog=exit_code_text(),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    help="Config file. Default: $CKPT_CONFIG, else the first of ./config.yaml, "
    "$XDG_CONFIG_HOME/ckpt/config.yaml (~/.config/ckpt/...), /etc/ckpt/config.yaml, the one "
    "the last `ckpt serve` found in its folder, else the built-in one.",
)
@click.option(
    "--db",
    "database",
    metavar="URL",
    help="Catalog SQLAlchemy URL; overrides $CKPT_DB and the config's `database`.",
)
@click.option(
    "-v",
    "--debug",
    is_flag=True,
    help="Say which config and catalog are in use; debug logs; tracebacks on errors.",
)
@click.version_option(package_name="ckpt-daemon", prog_name="ckpt")
@click.pass_context
def main_group(
    ctx: click.Context, config_path: str | None, database: str | None, debug: bool
) -> None:
    """Index, query and manage ML training checkpoints.

    The config is the file named by --config or $CKPT_CONFIG (which must exist), else the first
    found of ./config.yaml, $XDG_CONFIG_HOME/ckpt/config.yaml (default ~/.config/ckpt/),
    /etc/ckpt/config.yaml, the config the last `ckpt serve` found in its working folder,
    else the built-in default. `ckpt status` and --debug say which config and catalog are in
    use. Only scan, serve and db upgrade create a catalog (and say so on stderr); any other
    command with none there exits 2 naming the catalog and config it looked at.

    \b
    Example:
      ckpt scan && ckpt list --run exp1 --sort val_loss
      python predict.py --weights "$(ckpt best --metric val_loss)"
    """
    ctx.obj = Context(config_path, database, debug)


def all_commands(
    group: click.Group | None = None, prefix: str = ""
) -> list[tuple[str, click.Command]]:
    """Every command and sub-group as ("trash restore", command), for help and docs checks."""
    group = group or main_group
    ctx = click.Context(group)
    found: list[tuple[str, click.Command]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None:
            continue
        found.append((prefix + name, command))
        if isinstance(command, click.Group):
            found += all_commands(command, f"{prefix}{name} ")
    return found
