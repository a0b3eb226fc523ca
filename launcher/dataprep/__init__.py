"""Real training data: tokenize a corpus into Megatron's indexed dataset, check data settings, pre-build caches.

Only `check` is imported by the launcher's pre-launch checks; it needs neither torch nor megatron.
`prepare` (tokenize + write) needs megatron-core and the `tokenizers` package; `index_cache` needs megatron-core.
"""
