"""Programs that run in child processes (readers of untrusted files, TensorFlow, Keras loads) and
the parent-side clients that start, bound and talk to them."""
