"""The "Sparse executions" table: kernel precision and the 2:4 exchange, read from `method_extras`."""

from __future__ import annotations

import pandas as pd

from dstbench.report.sparse_executions import exchange_row, sparse_execution_table

TWO_FOUR = {
    "execution": "semi_structured", "flops_basis": "dense_equivalent", "kernel_precision": "bf16",
    "exchange_requested": 0.2, "exchange_achieved": 0.19, "exchange_as_proposed": 0.1,
    "exchange_unrequested_removal_share": 0.5, "exchange_unrequested_above_median": 0.3,
    "exchange_updates": [
        {"update": 1, "requested": 0.3, "achieved": 0.29, "as_proposed": 0.15, "unrequested_removals": 9078,
         "unrequested_removal_share": 0.53, "unrequested_above_median": 0.3, "unrequested_turn_ons": 4000},
        {"update": 2, "requested": 0.1, "achieved": 0.09, "as_proposed": 0.05, "unrequested_removals": 100,
         "unrequested_removal_share": 0.47, "unrequested_above_median": 0.3, "unrequested_turn_ons": 120},
    ],
}
CSR = {"execution": "csr", "flops_basis": "executed", "kernel_precision": "fp32"}
CONDENSED = {"execution": "condensed", "flops_basis": "executed", "kernel_precision": "bf16"}


def _derived() -> pd.DataFrame:
    return pd.DataFrame([
        {"method": "rigl", "density": 0.5, "execution": "masked", "method_extras": {"kernel_precision": "bf16"}, "run": "r"},
        {"method": "rigl_csr", "density": 0.5, "execution": "csr", "method_extras": CSR, "run": "r"},
        {"method": "rigl_2to4", "density": 0.5, "execution": "semi_structured", "method_extras": TWO_FOUR, "run": "r"},
        {"method": "dense", "density": 1.0, "execution": None, "method_extras": {}, "run": "r"},
        {"method": "srigl_condensed", "density": 0.1, "execution": "condensed", "method_extras": CONDENSED, "run": "r"},
    ])


def test_sparse_cases_show_their_precision_and_the_2to4_exchange() -> None:
    table = sparse_execution_table(_derived())
    assert table is not None and len(table.headers) == len(table.rows[0])
    assert table.rows == [
        ["rigl_csr", "0.5", "csr", "fp32", "executed", "—", "—", "—", "—", "—", "—", "—"],
        ["rigl_2to4", "0.5", "semi_structured", "bf16", "dense_equivalent", "2", "20.0%", "19.0%", "10.0%",
         "50.0%", "30.0%", "4,120"],
        ["srigl_condensed", "0.1", "condensed", "bf16", "executed", "—", "—", "—", "—", "—", "—", "—"],
    ]


def test_no_sparse_case_no_table() -> None:
    assert sparse_execution_table(_derived().iloc[[0, 3]]) is None
    assert sparse_execution_table(_derived().drop(columns=["method_extras"])) is None


def test_malformed_extras_read_as_absent() -> None:
    assert exchange_row(None) == exchange_row("text") == {
        "kernel_precision": None, "flops_basis": None, "updates": None, "requested": None, "achieved": None, "as_proposed": None,
        "unrequested_removal_share": None, "unrequested_above_median": None, "unrequested_turn_ons": None,
    }
    assert exchange_row({"exchange_updates": "x"})["updates"] is None
