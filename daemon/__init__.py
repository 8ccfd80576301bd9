"""ckpt-daemon: watches training folders, indexes checkpoints, manages them."""
