"""The sglang adapter: SGLang's real Scheduler, radix cache and KV allocator, no model.

factory.py   registry entry point; declares capabilities (imports no SGLang)
fit.py       fit_config (imports no SGLang: the fuzzer's swarm imports it in processes
             that may never build an engine)
stubs.py     in-process stand-ins for the GPU-only modules SGLang imports (no SGLang)
rows.py      reads of SGLang's req_to_token rows (no SGLang)
adapter.py   the Engine protocol over the Scheduler (imports SGLang)
build.py     builds the Scheduler with `__new__`, as SGLang's CPU tests do (imports SGLang)
snapshot.py  KVSnapshot over the allocator, tree and rows (imports SGLang)
faults.py    fault points through SGLang's own hooks (imports SGLang)
"""
