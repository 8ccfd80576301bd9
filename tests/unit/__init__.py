"""Pure logic: no TensorFlow, no subprocesses, the whole folder in seconds."""
