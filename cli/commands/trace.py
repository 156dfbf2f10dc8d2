"""`schedcheck trace import|gen|stats|head`: convert, generate, summarize and peek at traces.

All four read or write our JSONL trace schema (README "Trace format"); a bad input line is
answered with `FILE:LINE: FIELD: what is wrong` on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from itertools import islice
from typing import Any

from schedcheck.cli.commands.common import (
    EXIT_OK,
    UsageError,
    add_json_flag,
    add_trace_input_args,
    open_trace,
    positive_float,
    positive_int,
    progress,
    run_guarded,
    write_trace_output,
)
from schedcheck.cli.output import emit_json, emit_line
from schedcheck.traces import TraceRequest, request_to_line
from schedcheck.traces.generators import KINDS, GenOptions, LengthSpec, generate
from schedcheck.traces.prefix import DEFAULT_TOKEN_BLOCK_SIZE
from schedcheck.traces.stats import LengthSummary, TraceStats, compute_stats

_RAW = argparse.RawDescriptionHelpFormatter
_HEAD_MAX = 10**6


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `trace` and its four actions to the top-level parser."""
    parser = subparsers.add_parser(
        "trace",
        help="import, generate, summarize and peek at request traces",
        description="Work with request traces: our JSONL schema and the public formats "
        "(Mooncake JSONL, Azure 2023 CSV, BurstGPT CSV), plain or xz/gzip-compressed. The "
        "real public traces ship in traces/corpus/real/.",
    )
    actions = parser.add_subparsers(dest="trace_action", metavar="ACTION", required=True)
    _register_import(actions)
    _register_gen(actions)
    _register_stats(actions)
    _register_head(actions)


def _register_import(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "import",
        help="convert a Mooncake/Azure/BurstGPT trace to our JSONL schema",
        formatter_class=_RAW,
        description="Convert a public trace to our schema, optionally windowed and re-timed.\n"
        "  schedcheck trace import conversation_trace.jsonl --from mooncake -o conv.jsonl\n"
        "  schedcheck trace import code.csv --from azure --start-s 300 --duration-s 60 "
        "--time-scale 0.5 -o code.jsonl",
    )
    add_trace_input_args(parser, required=True, metavar="SRC")
    _add_output(parser)
    parser.set_defaults(run=run_guarded(_run_import))


def _register_gen(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "gen",
        help="generate a synthetic trace (deterministic for a seed)",
        formatter_class=_RAW,
        description=_GEN_DESCRIPTION,
    )
    parser.add_argument("kind", metavar="KIND", choices=tuple(KINDS), help=" | ".join(KINDS))
    parser.add_argument("--seed", type=int, default=0, help="numpy Generator seed (default 0)")
    _add_gen_load_args(parser)
    _add_gen_length_args(parser)
    _add_gen_shape_args(parser)
    _add_output(parser)
    parser.set_defaults(run=run_guarded(_run_gen))


def _register_stats(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "stats",
        help="request count, time span, rate, length percentiles, prefix-sharing ratio",
        description="Summarize a trace in one streaming pass. The prefix-sharing ratio is "
        "the token-weighted prefix hit ratio under an unbounded cache: hash-id prompts match "
        "leading hash blocks already seen, token prompts full blocks of --block-size tokens; "
        "a later turn's history counts as hits.",
    )
    add_trace_input_args(parser, required=True)
    parser.add_argument(
        "--block-size",
        type=positive_int,
        default=DEFAULT_TOKEN_BLOCK_SIZE,
        help=f"block size for token prompts in the hit ratio (default {DEFAULT_TOKEN_BLOCK_SIZE})",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run_stats))


def _register_head(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "head",
        help="show the first requests of a trace",
        description="Show the first N requests (after windowing) as a table, or with --json "
        "as canonical JSONL lines of our schema.",
    )
    add_trace_input_args(parser, required=True)
    parser.add_argument(
        "-n", dest="count", type=positive_int, default=10, help="how many (default 10)"
    )
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run_head))


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="output JSONL file ('-' for stdout); written only once complete",
    )


def _run_import(args: argparse.Namespace) -> int:
    requests = progress(open_trace(args), desc="import")
    count = write_trace_output(args.output, requests)
    print(f"wrote {count} requests to {args.output}", file=sys.stderr)
    return EXIT_OK


def _run_stats(args: argparse.Namespace) -> int:
    requests = progress(open_trace(args), enabled=not args.json, desc="stats")
    stats = compute_stats(requests, token_block_size=args.block_size)
    if args.json:
        emit_json({"trace": args.trace, **stats.to_json()}, indent=1, sort_keys=True)
    else:
        print(format_stats(args.trace, stats))
    return EXIT_OK


def _run_head(args: argparse.Namespace) -> int:
    requests = islice(open_trace(args), min(args.count, _HEAD_MAX))
    if args.json:
        for request in requests:
            emit_line(request_to_line(request))
        return EXIT_OK
    print(f"{'request_id':<20} {'arrival_s':>12} {'prompt':>8} {'output':>7}  session/parent")
    for request in requests:
        print(_head_row(request))
    return EXIT_OK


def _head_row(request: TraceRequest) -> str:
    form = "tok" if request.prompt_token_ids is not None else f"h{request.hash_block_size}"
    links = " ".join(
        f"{name}={value}"
        for name, value in (
            ("session", request.session_id),
            ("parent", request.parent_request_id),
            ("think_s", request.think_time_s or None),
            ("abort_s", request.abort_time_s),
        )
        if value is not None
    )
    prompt = f"{request.num_own_prompt_tokens}{form}"
    return (
        f"{request.request_id:<20} {request.arrival_time_s:>12.3f} {prompt:>8} "
        f"{request.output_length:>7}  {links}"
    ).rstrip()


def format_stats(trace: str, stats: TraceStats) -> str:
    """The human-readable summary `trace stats` prints."""
    rate = "-" if stats.arrival_rate_per_s is None else f"{stats.arrival_rate_per_s:,.2f} req/s"
    lines = [
        f"trace          {trace}",
        f"requests       {stats.requests:,}",
        f"time span      {stats.time_span_s:,.3f} s",
        f"arrival rate   {rate}",
        f"input length   {_lengths(stats.input_length)}",
        f"output length  {_lengths(stats.output_length)}",
        f"prefix hits    {stats.prefix_hit_ratio:.2%} of {stats.prompt_tokens:,} prompt tokens "
        f"(unbounded cache; token prompts in blocks of {stats.token_block_size})",
        f"sessions       {stats.sessions:,} ({stats.later_turns:,} later turns), "
        f"aborts {stats.aborts:,}",
    ]
    return "\n".join(lines)


def _lengths(summary: LengthSummary) -> str:
    return (
        f"p50 {summary.p50:,.0f}  p90 {summary.p90:,.0f}  p99 {summary.p99:,.0f}  "
        f"max {summary.max:,}  mean {summary.mean:,.1f}"
    )


# --- trace gen -------------------------------------------------------------------------

_GEN_DESCRIPTION = """\
Generate a trace; the same KIND, options and --seed give the same file.

kinds:
  poisson        open loop, exponential gaps at --rate
  gamma          open loop, gamma gaps of shape --burstiness (as vLLM bench serve)
  closed-loop    --num-users Locust-style users x --requests-per-user, --think-time-s
  shared-prefix  --num-groups x --group-size prompts; a group shares a --prefix-len prompt
  multi-turn     --num-sessions x --turns; each turn continues the previous one

lengths: N (fixed) or LO:HI (inclusive range); with --lengths boundary a range draws only
k*B-1, k*B, k*B+1 for B = --block-size (a fixed N stays N).

examples:
  schedcheck trace gen gamma --rate 20 --burstiness 0.5 --num-requests 2000 -o bursty.jsonl
  schedcheck trace gen shared-prefix --num-groups 4 --group-size 16 --prefix-len 1024 \\
      --input-len 15:49 --lengths boundary -o groups.jsonl
"""


def _add_gen_load_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("load")
    group.add_argument(
        "--num-requests",
        type=positive_int,
        default=100,
        metavar="N",
        help="requests (poisson, gamma; default 100)",
    )
    group.add_argument(
        "--rate",
        type=positive_float,
        default=10.0,
        metavar="R",
        help="arrivals per second, 'inf' = all at 0 (open-loop kinds, "
        "shared-prefix, multi-turn session starts; default 10)",
    )
    group.add_argument(
        "--burstiness",
        type=positive_float,
        default=None,
        metavar="K",
        help="gamma shape: CV of gaps = 1/sqrt(K); 1 = Poisson (default 1)",
    )
    group.add_argument(
        "--think-time-s",
        default="1",
        metavar="S|LO:HI",
        help="think time, uniform in LO:HI (closed-loop, multi-turn; default 1)",
    )
    group.add_argument(
        "--spawn-rate",
        type=positive_float,
        default=1.0,
        metavar="U",
        help="users spawned per second (closed-loop; default 1)",
    )


def _add_gen_length_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("lengths")
    group.add_argument(
        "--input-len",
        default="256:1024",
        metavar="N|LO:HI",
        help="own prompt tokens (the suffix for shared-prefix, later turns' "
        "new text for multi-turn; default 256:1024)",
    )
    group.add_argument(
        "--output-len",
        default="16:128",
        metavar="N|LO:HI",
        help="tokens to generate (default 16:128)",
    )
    group.add_argument(
        "--prefix-len",
        default="512",
        metavar="N|LO:HI",
        help="system prompt tokens (shared-prefix; default 512)",
    )
    group.add_argument(
        "--first-len",
        default="256:1024",
        metavar="N|LO:HI",
        help="first turn's prompt tokens (multi-turn; default 256:1024)",
    )
    group.add_argument(
        "--lengths",
        choices=("uniform", "boundary"),
        default="uniform",
        help="how ranges are drawn (default uniform)",
    )
    group.add_argument(
        "--block-size",
        type=positive_int,
        default=16,
        metavar="B",
        help="block size for --lengths boundary (default 16)",
    )
    group.add_argument(
        "--vocab-size",
        type=positive_int,
        default=32_000,
        metavar="V",
        help="token ids are drawn from [3, V) (default 32000)",
    )


def _add_gen_shape_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("shape")
    group.add_argument(
        "--num-groups",
        type=positive_int,
        default=4,
        metavar="N",
        help="shared-prefix groups (default 4)",
    )
    group.add_argument(
        "--group-size",
        type=positive_int,
        default=8,
        metavar="M",
        help="prompts per group (default 8)",
    )
    group.add_argument(
        "--num-users",
        type=positive_int,
        default=8,
        metavar="U",
        help="closed-loop users (default 8)",
    )
    group.add_argument(
        "--requests-per-user",
        type=positive_int,
        default=8,
        metavar="R",
        help="requests per closed-loop user (default 8)",
    )
    group.add_argument(
        "--num-sessions",
        type=positive_int,
        default=16,
        metavar="S",
        help="multi-turn conversations (default 16)",
    )
    group.add_argument(
        "--turns",
        type=positive_int,
        default=4,
        metavar="T",
        help="turns per conversation (default 4)",
    )


def _run_gen(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    count = write_trace_output(args.output, generate(args.kind, args.seed, gen_options(args)))
    print(f"wrote {count} requests to {args.output}", file=sys.stderr)
    return EXIT_OK


def gen_options(args: argparse.Namespace) -> GenOptions:
    """The GenOptions that `trace gen`'s parsed arguments describe (UsageError if bad)."""
    if args.kind == "poisson" and args.burstiness not in (None, 1.0):
        raise UsageError("poisson has burstiness 1; use KIND gamma for --burstiness")
    if args.burstiness is not None and math.isinf(args.burstiness):
        raise UsageError("--burstiness must be finite")
    think_min_s, think_max_s = _range(args.think_time_s, "--think-time-s", float, 0.0)
    return GenOptions(
        num_requests=args.num_requests,
        rate_per_s=args.rate,
        burstiness=1.0 if args.burstiness is None else args.burstiness,
        input_lengths=_length_spec(
            args, args.input_len, "--input-len", 0 if args.kind == "shared-prefix" else 1
        ),
        output_lengths=_length_spec(args, args.output_len, "--output-len", 1),
        prefix_lengths=_length_spec(args, args.prefix_len, "--prefix-len", 1),
        first_lengths=_length_spec(args, args.first_len, "--first-len", 1),
        num_groups=args.num_groups,
        group_size=args.group_size,
        num_users=args.num_users,
        requests_per_user=args.requests_per_user,
        spawn_rate_per_s=args.spawn_rate,
        think_min_s=think_min_s,
        think_max_s=think_max_s,
        num_sessions=args.num_sessions,
        turns=args.turns,
        vocab_size=_vocab_size(args.vocab_size),
    )


def _length_spec(args: argparse.Namespace, text: str, option: str, minimum: int) -> LengthSpec:
    """`N` (fixed) or `LO:HI`, drawn uniform or at block boundaries (--lengths)."""
    low, high = _range(text, option, int, minimum)
    if low == high:
        return LengthSpec.fixed(low)
    if args.lengths == "uniform":
        return LengthSpec.uniform(low, high)
    if not LengthSpec.boundary_possible(low, high, args.block_size):
        raise UsageError(f"{option} {text}: no k*{args.block_size}+-1 length in [{low}, {high}]")
    return LengthSpec.boundary(low, high, args.block_size)


def _range(text: str, option: str, kind: Any, minimum: Any) -> tuple[Any, Any]:
    """`X` or `LO:HI` parsed by `kind`, with minimum <= LO <= HI (UsageError otherwise)."""
    parts = text.split(":")
    try:
        values = [kind(part) for part in parts]
    except ValueError:
        raise UsageError(f"{option} must be N or LO:HI, got {text!r}") from None
    if len(values) not in (1, 2) or not minimum <= values[0] <= values[-1] < math.inf:
        raise UsageError(f"{option} must be N or LO:HI with {minimum} <= LO <= HI, got {text!r}")
    return values[0], values[-1]


def _vocab_size(vocab_size: int) -> int:
    if vocab_size <= 3:
        raise UsageError(f"--vocab-size must be > 3 (ids 0..2 are special), got {vocab_size}")
    return int(vocab_size)
