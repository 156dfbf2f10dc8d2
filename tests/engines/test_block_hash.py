"""Chained block hashes: content, parent chain and extra keys; stable across processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
from refengine_helpers import request

from schedcheck.engines.reference.block_hash import ROOT_HASH, BlockHasher, salt_extra_key
from schedcheck.engines.reference.mutants.hashed import HashIgnoresSalt, HashNoParent
from schedcheck.engines.reference.request import Request


def _hashes(values, block_size=4, extra=b"", hasher=BlockHasher) -> list[bytes]:
    array = np.asarray(values, dtype=np.int64)
    out: list[bytes] = []
    hasher(block_size).extend(out, memoryview(array.data).cast("B"), array.size, extra)
    return out


def _blake(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def test_known_answer_pins_the_hash_definition():
    """BLAKE2b-256(parent || int64 LE tokens [|| extra]); a change here is a format change."""
    assert _blake(b"schedcheck:block-hash-root") == ROOT_HASH
    h0, h1 = _hashes(range(8))
    assert _blake(ROOT_HASH + np.arange(4).astype("<i8").tobytes()) == h0
    assert _blake(h0 + np.arange(4, 8).astype("<i8").tobytes()) == h1
    assert h0.hex().startswith("86401d3c91a7420a")
    assert h1.hex().startswith("d2b00e273d6dcc87")


def test_only_full_blocks_are_hashed():
    assert len(_hashes(range(7))) == 1
    assert len(_hashes(range(8))) == 2
    assert _hashes(range(3)) == []


def test_parent_chain_and_extra_keys():
    a = _hashes([1, 2, 3, 4, 5, 6, 7, 8])
    b = _hashes([9, 9, 9, 9, 5, 6, 7, 8])
    assert a[1] != b[1]  # same tokens, different parent
    salted = _hashes([1, 2, 3, 4, 5, 6, 7, 8], extra=salt_extra_key("s"))
    assert salted[0] != a[0] and salted[1] != a[1]  # the salt reaches later blocks by chain
    assert salt_extra_key(None) == b""
    assert salt_extra_key("ab") == b"salt:" + (2).to_bytes(8, "little") + b"ab"


def test_mutant_hashers_drop_parent_or_extra_key():
    a = _hashes([1, 2, 3, 4, 5, 6, 7, 8], hasher=HashNoParent)
    b = _hashes([9, 9, 9, 9, 5, 6, 7, 8], hasher=HashNoParent)
    assert a[1] == b[1] == _blake(ROOT_HASH + np.arange(5, 9).astype("<i8").tobytes())
    salted = _hashes(range(8), extra=b"x", hasher=HashNoParent)
    assert salted[0] == _blake(ROOT_HASH + np.arange(4).astype("<i8").tobytes() + b"x")
    assert salted[1] == _hashes(range(8), hasher=HashNoParent)[1]  # the key: block 0 only
    assert _hashes(range(8), extra=b"x", hasher=HashIgnoresSalt) == _hashes(range(8))


def test_request_hashes_grow_with_outputs_lazily():
    req = Request(request("r", range(6), max_tokens=4), BlockHasher(4), arrival_seq=0)
    assert len(req.block_hashes) == 1
    req.append_output_token(6)
    assert len(req._block_hashes) == 1  # not computed until asked
    req.append_output_token(7)
    assert req.block_hashes == _hashes(range(8))


def test_hashes_do_not_depend_on_pythonhashseed():
    code = (
        "import numpy as np\n"
        "from schedcheck.engines.reference.block_hash import BlockHasher, salt_extra_key\n"
        "t = np.arange(8, dtype=np.int64); out = []\n"
        "BlockHasher(4).extend(out, memoryview(t.data).cast('B'), 8, salt_extra_key('s'))\n"
        "print(out[-1].hex())\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    child = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert child.stdout.strip() == _hashes(range(8), extra=salt_extra_key("s"))[-1].hex()
