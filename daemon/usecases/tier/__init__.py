"""The object-store tier's use cases, in one folder: `ckpt tier` and retention's `tier_after`
(`tiering`), `ckpt fetch` (`fetching`), the remote trash (`remote_trash`, its acts
`rail_remote`), `ckpt verify --remote` (`remote_verify`), `best`/`latest`/`runs` answered from
the store (`remote_answers`), the start-up check (`remote_start`) and the listings' `location`
(`locations`). They reach the store only through `remote.store.ObjectStore`, never a client
library."""
