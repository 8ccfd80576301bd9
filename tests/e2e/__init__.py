"""The `ckpt` CLI and `ckpt serve` as subprocesses, the systemd units, the README, the docs."""
