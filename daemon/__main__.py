"""`python -m ckpt_daemon` is the `ckpt` command."""

from .cli.main import main

main()
