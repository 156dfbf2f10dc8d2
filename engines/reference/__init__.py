"""The reference engine: a vLLM v1-style scheduler over one of two block managers.

Modules, one idea each:

- `engine.py`          make_engine(config) -> ReferenceEngine (protocol.Engine, "reference")
- `scheduler.py`       the vLLM v1 rule: running first, then waiting; chunked prefill,
                       preemption by recompute, aborts, rejection of what can never fit
- `request.py`         a request's state (vLLM v1 names); `request_queue.py` FCFS / priority
- `chunking.py`        where a chunk may end (block-alignment modes, vllm#7753)
- `kv_manager.py`      the interface both block managers implement (KVCacheManager)
- `block_hash.py`      chained BLAKE2b block hashes
- `block_pool.py`, `hashed_manager.py`   vLLM v1 BlockPool + KVCacheManager ("hashed")
- `radix_cache.py`, `radix_manager.py`   SGLang RadixCache + page pool ("radix")
- `snapshot.py`        live read-only views for KV snapshots
- `fast_output.py`     the per-step ScheduledRequest constructor
- `mutants/`          the catalog of named mutants (the real bug classes of
                       docs/bug-classes.md), each a subclass of a clean class above (or a
                       runner-metadata transform); the clean modules never test for one
"""
