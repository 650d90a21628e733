"""treeattn.serving.token_table.page_table on the CPU: SGLang-shaped token tables (req_to_token
rows of token slots at request pool indices, stale slots past each length) from a real paged KV
manager become the block tables of the same batch at page size 1 (a page is a slot) and 4; the
serving core decodes them at page size 1 against the float64 oracle; argument errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import numpy_oracle
from test_serving import Batch
from treeattn.serving import ServingCore
from treeattn.serving.token_table import page_table


@pytest.mark.parametrize("page_size", [1, 4])
def test_page_table_equals_block_tables(page_size):
    b = Batch(2, num_pages=3000, page_size=page_size)
    for _ in range(30):
        b.step(fork=True)
        table, idx, lens = b.token_table()
        bt, got_lens = page_table(torch.from_numpy(table), torch.from_numpy(idx), lens,
                                  page_size)
        want, want_lens = b.tables()
        assert np.array_equal(got_lens, want_lens)
        for r, n in enumerate(lens):
            m = -(-int(n) // page_size)
            assert list(bt[r, :m]) == list(want[r, :m]), f"row {r}"


def test_core_decodes_token_tables_at_page_size_one():
    rng = np.random.default_rng(4)
    H, Hk, D, slots = 4, 2, 64, 3000
    b = Batch(9, num_pages=slots, page_size=1)
    core = ServingCore(H, Hk, D, 1, num_pages=slots, verify=True)
    # SGLang's token-major pool [slots, heads, dim], read as pages of one slot
    k = torch.from_numpy(rng.uniform(-1, 1, (slots, Hk, D)).astype(np.float32))
    v = torch.from_numpy(rng.uniform(-1, 1, (slots, Hk, D)).astype(np.float32))
    kc, vc = k.view(slots, 1, Hk, D), v.view(slots, 1, Hk, D)
    for _ in range(25):
        b.step(fork=True)
        table, idx, lens = b.token_table()
        bt, lens = page_table(torch.from_numpy(table), torch.from_numpy(idx), lens, 1)
        core.prepare(bt, lens)
        q = torch.from_numpy(rng.uniform(-1, 1, (len(lens), H, D)).astype(np.float32))
        out = core.decode(q, kc, vc)
        ref, _ = numpy_oracle(q.numpy(), kc.numpy(), vc.numpy(), bt, lens)
        np.testing.assert_allclose(out.numpy(), ref, atol=2e-5)
    assert core.sync.counts["incremental"] > 0, core.sync.counts


def test_page_table_errors_name_the_argument():
    table = torch.zeros(4, 8, dtype=torch.int32)
    table[1, :5] = torch.tensor([8, 9, 10, 11, 12])
    idx = torch.tensor([1])
    bt, lens = page_table(table, idx, [5], 4)
    assert list(bt[0, :2]) == [2, 3] and list(lens) == [5]
    with pytest.raises(ValueError, match="req_to_token: request 1 .* slot 9"):
        page_table(table[:, 1:], idx, [5], 4)  # pages do not start at offset 0
    with pytest.raises(ValueError, match="seq_lens: entry 0 is 0"):
        page_table(table, idx, [0], 4)
    with pytest.raises(ValueError, match="seq_lens: entry 0 is 9"):
        page_table(table, idx, [9], 4)
    with pytest.raises(ValueError, match="seq_lens: 2 entries"):
        page_table(table, idx, [5, 5], 4)
    with pytest.raises(ValueError, match="req_pool_indices: entry 0 is 4"):
        page_table(table, torch.tensor([4]), [5], 4)
    with pytest.raises(ValueError, match="req_pool_indices: empty"):
        page_table(table, torch.tensor([], dtype=torch.int64), np.zeros(0, np.int64), 4)
    with pytest.raises(TypeError, match="req_to_token"):
        page_table(table.float(), idx, [5], 4)
    with pytest.raises(TypeError, match="req_pool_indices"):
        page_table(table, [1], [5], 4)
    with pytest.raises(TypeError, match="seq_lens"):
        page_table(table, idx, torch.tensor([5], device="meta"), 4)
    with pytest.raises(ValueError, match="page_size"):
        page_table(table, idx, [5], 0)
