"""Our modules in-process on real files, real SQLite, real readers and transforms."""
