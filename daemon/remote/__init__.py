"""Object storage: the remote tier (an S3-compatible store). `remote.s3` is the only boto3
import; `remote.keys` names the objects."""
