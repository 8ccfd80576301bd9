"""The test suite: unit/ (pure, fast), integration/ (in-process, real files), e2e/ (the CLI and
the daemon as subprocesses). A package, so that test modules of the same name in different
folders stay apart and `tests.support` imports the same way in every run."""
