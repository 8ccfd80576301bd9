"""`python -m daemon` is the `ckpt` command."""

from daemon.cli import main

main()
