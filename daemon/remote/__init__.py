"""Object storage: the remote tier's adapters behind one interface (`remote.store.ObjectStore`).
`remote.s3` is the S3 adapter and the only boto3 import; `remote.keys` names the objects."""
