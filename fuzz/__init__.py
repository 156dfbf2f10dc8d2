"""Fuzzing scheduler interleavings: a bug finder that needs no hand-written scenario.

strategies.py  Hypothesis strategies for small traces that stress index arithmetic
swarm.py       engine configs drawn per example (TigerBeetle VOPR's options swarm)
scenario.py    one example: trace + config + faults + seed, run and judged
ddmin.py       delta debugging on a trace's requests (failures found outside Hypothesis)
seeds.py       every seed of a campaign derived from --seed (numpy SeedSequence)
database.py    the failure database under .schedcheck/ (Hypothesis' plus found bundles)
worker.py      one worker's seed stream: rounds of Hypothesis, shrinking, bundles
campaign.py    workers in parallel (spawn), budget, first finding, coverage
regression.py  pytest files under tests/regressions/ that replay a found bundle
score.py       the mutation score: one campaign per mutant of the reference engine
"""
