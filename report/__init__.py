"""Reports a person looks at: one self-contained HTML page per bundle, run, campaign or nightly.

Built only from what those write (a bundle's files, `replay --json`, a campaign's directory,
the nightly's nightly.json), never from engine internals: where a finding's KV story needs
more than the recorded schedule says, the schedule is replayed offline through the shadow
KV (`replay.py`). The data modules import no plotting library; `figures/` and `page.py`
need the `report` extra (plotly).
"""
