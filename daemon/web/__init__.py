"""The read-only web view (`service.web_listen`, `ckpt web`): server-rendered pages and their
JSON over the same `api.Catalog` calls the CLI makes. Needs the `web` extra (Jinja2)."""
