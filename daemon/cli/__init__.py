"""The `ckpt` command: `main` (entry point and the one error handler), `group` (the global
options and the lazy table of commands), `context` (what every command receives), `output` (all
printing), `documents` (every `--json` document), and one module per command family."""
